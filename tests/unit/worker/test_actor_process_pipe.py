"""The worker's control pipe to an actor host: a send that runs after the host was
closed must never write into whatever pipe reused the fd number (that would hand a new
spare another actor's assignment), and closing never pulls the fd from under a send."""

from __future__ import annotations

import asyncio
import os
import threading
from types import SimpleNamespace

import pytest

from ftrl.worker.pipe import read_frame
from ftrl.worker.processes import ActorProcess


class _Transport:
    def close(self) -> None:
        pass


def _host(ctl_w: int) -> ActorProcess:
    proc = SimpleNamespace(pid=12345, returncode=None)
    return ActorProcess(proc, ctl_w, asyncio.StreamReader(), _Transport())


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def test_a_send_after_close_does_not_reach_a_pipe_that_reused_the_fd():
    async def main() -> None:
        r, w = os.pipe()
        host = _host(w)
        host.close()
        os.close(r)
        r2, w2 = os.pipe()  # the lowest free numbers: very likely the ones just closed
        try:
            os.set_blocking(r2, False)
            with pytest.raises(BrokenPipeError, match="closed"):
                host.send({"kind": "assign", "spec": b"x"})
            with pytest.raises(BlockingIOError):
                os.read(r2, 1)  # nothing arrived in the new pipe
        finally:
            os.close(r2)
            os.close(w2)

    asyncio.run(main())


def test_close_waits_for_a_blocked_send_to_end_before_releasing_the_fd():
    async def main() -> None:
        r, w = os.pipe()
        host = _host(w)
        big = {"kind": "assign", "spec": os.urandom(1 << 20)}  # far beyond a pipe's buffer
        sent = threading.Event()
        errors: list[BaseException] = []

        def send() -> None:
            try:
                host.send(big)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
            sent.set()

        t = threading.Thread(target=send, daemon=True)
        t.start()
        assert not await asyncio.to_thread(sent.wait, 0.2)  # blocked: nobody reads yet
        host.close()
        assert _fd_open(w)  # still owned by the send in progress
        assert read_frame(r) == big  # the reader drains it: the send completes
        assert sent.wait(10) and not errors
        t.join(5)
        assert not _fd_open(w)  # released by the send that held it
        os.close(r)

    asyncio.run(main())
