"""One exception hierarchy for ftrl, mapped to gRPC status codes in one place.

Servers raise these; `status_of` turns one into a (code, message) pair for the
wire and `error_from_rpc` turns a received grpc error back into the same class.
Each class names its code (`code`, a `grpc.StatusCode` member name), so processes that
only raise these errors (sub-env children, the sample plane) never import grpc.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class FtrlError(Exception):
    """Base class of every error ftrl raises."""

    code: str = "UNKNOWN"


class InvalidArgumentError(FtrlError, ValueError):
    """Bad input: malformed payload, bad name, unknown method, bad config."""

    code = "INVALID_ARGUMENT"


class ConfigError(InvalidArgumentError):
    """A configuration that cannot work (unknown key, conflicting options)."""


class NotFoundError(FtrlError, LookupError):
    """No actor, node or job of that name."""

    code = "NOT_FOUND"


class AlreadyExistsError(FtrlError):
    """A live actor or node with that name or id exists already."""

    code = "ALREADY_EXISTS"


class ResourceExhaustedError(FtrlError):
    """A size, count or rate limit was exceeded."""

    code = "RESOURCE_EXHAUSTED"


class UnauthenticatedError(FtrlError):
    """Missing or wrong cluster token."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(FtrlError):
    """Authenticated, but not allowed (e.g. a fenced, stale actor calling)."""

    code = "PERMISSION_DENIED"


class StaleIncarnationError(FtrlError):
    """The call was meant for another incarnation of the actor (fencing).

    `discarded` is True when the call did run, on an incarnation that was fenced
    while it ran, and its result was thrown away."""

    code = "FAILED_PRECONDITION"
    discarded = False


class FailedPreconditionError(FtrlError):
    """The request is valid but the system is not in a state to do it (say why and
    what to do): another ftrl version, a job output that holds checkpoints, ..."""

    code = "FAILED_PRECONDITION"


class ActorUnavailableError(FtrlError):
    """The actor could not be reached (it died, is restarting, or the network failed)."""

    code = "UNAVAILABLE"


class ActorDiedError(FtrlError):
    """The actor is DEAD: out of restarts, killed, or it failed to construct."""

    code = "ABORTED"


class ActorStartError(ActorDiedError):
    """The actor's class could not be imported or its constructor raised."""

    def __init__(self, message: str, remote_type: str = "", remote_traceback: str = ""):
        super().__init__(message)
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


class MethodNotFoundError(FtrlError, AttributeError):
    """The actor has no public method of that name."""

    code = "UNIMPLEMENTED"


class FtrlTimeoutError(FtrlError, TimeoutError):
    """A deadline passed before the operation finished."""

    code = "DEADLINE_EXCEEDED"


class ActorError(FtrlError):
    """User code in an actor raised. Carries the remote type, message and traceback.

    The actor keeps serving after this; only the one call failed.
    """

    code = "UNKNOWN"

    def __init__(self, remote_type: str, message: str, remote_traceback: str = ""):
        super().__init__(f"{remote_type}: {message}")
        self.remote_type = remote_type
        self.remote_message = message
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = f"{self.remote_type}: {self.remote_message}"
        if self.remote_traceback:
            text += "\n--- remote traceback ---\n" + self.remote_traceback.rstrip()
        return text

    def __reduce__(self):  # keep it picklable for concurrent.futures in-process
        return (type(self), (self.remote_type, self.remote_message, self.remote_traceback))


_BY_CODE: dict[str, type[FtrlError]] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "NOT_FOUND": NotFoundError,
    "ALREADY_EXISTS": AlreadyExistsError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "FAILED_PRECONDITION": StaleIncarnationError,
    "UNAVAILABLE": ActorUnavailableError,
    "ABORTED": ActorDiedError,
    "DEADLINE_EXCEEDED": FtrlTimeoutError,
    "CANCELLED": ActorUnavailableError,
    "UNIMPLEMENTED": MethodNotFoundError,
}


#: Trailing metadata key naming the error class, where a status code alone is ambiguous.
ERROR_TYPE_KEY = "ftrl-error-type"
_BY_NAME: dict[str, type[FtrlError]] = {"FailedPreconditionError": FailedPreconditionError}


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message a server answers for `exc`."""
    import grpc

    if isinstance(exc, FtrlError):
        return grpc.StatusCode[exc.code], str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


def unreachable_hint(details: str) -> str:
    """A gRPC connection failure said plainly: what is wrong with the address."""
    low = details.lower()
    if "resolv" in low or "domain name not found" in low or "name or service not known" in low:
        return f"the host name does not resolve ({details})"
    if "connection refused" in low:
        return f"nothing listens on that port ({details})"
    return details


def error_from_rpc(err: grpc.RpcError, what: str = "") -> FtrlError:
    """Turn a received grpc error into the matching FtrlError subclass."""
    try:
        code = err.code()
        details = err.details() or ""
    except Exception:  # a non-call RpcError
        return ActorUnavailableError(f"{what}: {err}" if what else str(err))
    name = getattr(code, "name", "")
    cls = _BY_CODE.get(name, FtrlError)
    try:
        for key, value in err.trailing_metadata() or ():
            if key == ERROR_TYPE_KEY and value in _BY_NAME:
                cls = _BY_NAME[value]
    except Exception:  # no trailing metadata on this error
        pass
    if name in ("UNAVAILABLE", "CANCELLED") and what:
        details = f"{what} unreachable: {unreachable_hint(details)}"
    elif name == "DEADLINE_EXCEEDED" and what:
        details = f"{what}: deadline exceeded"
    error = cls(details or name or str(code))
    error.grpc_code = code  # type: ignore[attr-defined]
    return error
