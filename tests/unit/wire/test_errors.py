"""One exception hierarchy mapped to gRPC status codes both ways."""

from __future__ import annotations

import pickle

import grpc
import pytest

from ftrl.wire import errors as E


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize(
    "cls",
    [E.InvalidArgumentError, E.NotFoundError, E.AlreadyExistsError, E.ResourceExhaustedError,
     E.UnauthenticatedError, E.PermissionDeniedError, E.StaleIncarnationError,
     E.ActorUnavailableError, E.ActorDiedError, E.MethodNotFoundError, E.FtrlTimeoutError],
)
def test_status_roundtrip(cls):
    code, message = E.status_of(cls("the reason"))
    assert code == getattr(grpc.StatusCode, cls.code) and message == "the reason"
    back = E.error_from_rpc(FakeRpcError(code, message))
    assert type(back) is cls and "the reason" in str(back)


def test_unknown_exceptions_are_internal():
    code, message = E.status_of(KeyError("k"))
    assert code == grpc.StatusCode.INTERNAL and "KeyError" in message
    assert type(E.error_from_rpc(FakeRpcError(grpc.StatusCode.INTERNAL, "x"))) is E.FtrlError


def test_unavailable_names_the_peer():
    err = E.error_from_rpc(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connect failed"), "actor a")
    assert isinstance(err, E.ActorUnavailableError)
    assert str(err) == "actor a unreachable: connect failed"


def test_actor_error_carries_the_remote_side():
    err = E.ActorError("ValueError", "bad", "Traceback...\nValueError: bad")
    assert err.remote_type == "ValueError" and err.remote_message == "bad"
    assert "remote traceback" in str(err) and "Traceback..." in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert (again.remote_type, again.remote_message, again.remote_traceback) == (
        "ValueError", "bad", "Traceback...\nValueError: bad")


def test_hierarchy():
    assert issubclass(E.ActorStartError, E.ActorDiedError)
    assert issubclass(E.ConfigError, E.InvalidArgumentError)
    assert issubclass(E.InvalidArgumentError, ValueError)
    assert issubclass(E.MethodNotFoundError, AttributeError)
    for cls in (E.ActorError, E.NotFoundError, E.FtrlTimeoutError):
        assert issubclass(cls, E.FtrlError)


def test_raising_ftrl_errors_needs_no_grpc():
    """Sub-env children and the sample plane raise these errors; importing the module
    (and the sub-env child's module) must not load grpc (tens of ms of import and ~3 MB
    of PSS in every sub-env process)."""
    import subprocess
    import sys

    code = ("import sys, ftrl.wire.errors as E, ftrl.rl.sampling.sub_env, ftrl.rl.sampling.sample_plane; "
            "E.ConfigError('x'); print('grpc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
