"""The in-process actor stand-in behaves like runtime handles (fencing, deaths, timeouts)."""

from __future__ import annotations

import threading
import time

import pytest

from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorStartError,
    ActorUnavailableError,
    FtrlTimeoutError,
    InvalidArgumentError,
    StaleIncarnationError,
)
from tests.local_client import LocalClient


class Box:
    def __init__(self, value: int = 0, fail: bool = False):
        if fail:
            raise RuntimeError("cannot construct")
        self.value = value

    def get(self) -> int:
        return self.value

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def boom(self) -> None:
        raise KeyError("nope")

    def slow(self, s: float) -> str:
        time.sleep(s)
        return "done"

    def bad_result(self) -> object:
        return object()


BOX = "tests.unit.client.test_local_client:Box"


def test_calls_errors_and_codec_checks():
    with LocalClient() as client:
        h = client.create_actor(BOX, name="b", kwargs={"value": 2})
        assert h.call("add", 3) == 5
        assert h.submit("get").result() == 5
        with pytest.raises(ActorError) as info:
            h.call("boom")
        assert info.value.remote_type == "KeyError" and "raise KeyError" in info.value.remote_traceback
        assert h.call("get") == 5  # still serving after a user error
        with pytest.raises(InvalidArgumentError):
            h.call("add", object())
        with pytest.raises(ActorError, match="InvalidArgumentError"):
            h.call("bad_result")
        with pytest.raises(FtrlTimeoutError):
            h.options(timeout=0.05).call("slow", 0.5)
        with pytest.raises(ActorStartError, match="cannot construct"):
            client.create_actor(BOX, name="c", kwargs={"fail": True})


def test_crash_restart_fencing_and_death():
    with LocalClient() as client:
        h = client.create_actor(BOX, name="b", kwargs={"value": 1}, max_restarts=1)
        assert h.incarnation == 1
        pending = h.submit("slow", 0.5)
        time.sleep(0.05)
        client.crash_actor("b")
        with pytest.raises(ActorUnavailableError):
            pending.result(timeout=2)
        # the restarted actor refuses the old incarnation until the owner adopts it
        deadline = time.monotonic() + 2
        while True:
            with pytest.raises((StaleIncarnationError, ActorUnavailableError)) as info:
                h.call("get")
            if info.type is StaleIncarnationError or time.monotonic() > deadline:
                break
        assert info.type is StaleIncarnationError
        assert h.wait_alive(timeout=2) == 2
        assert h.call("get") == 1  # a fresh instance
        client.crash_actor("b")  # out of restarts now
        with pytest.raises(ActorDiedError):
            h.wait_alive(timeout=2)
        with pytest.raises(ActorDiedError):
            h.call("get")


def test_get_if_exists_and_kill():
    with LocalClient() as client:
        h1 = client.create_actor(BOX, name="b", kwargs={"value": 4})
        h2 = client.create_actor(BOX, name="b", kwargs={"value": 9}, get_if_exists=True)
        assert h2.call("get") == 4
        client.kill_actor("b")
        with pytest.raises(ActorDiedError):
            h1.call("get")


def test_delay_calls_makes_an_actor_slow():
    with LocalClient() as client:
        h = client.create_actor(BOX, name="b")
        client.delay_calls("b", 0.3)
        done = threading.Event()
        fut = h.submit("get")
        fut.add_done_callback(lambda _: done.set())
        assert not done.wait(0.1)
        assert fut.result(timeout=2) == 0
