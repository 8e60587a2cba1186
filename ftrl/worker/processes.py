"""Actor processes as the worker sees them, and the pool of warm spares.

The worker learns of a child's exit from the event loop's child watcher (a
SIGCHLD-driven wait), so a death is noticed at once, not by polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from ftrl.util.backoff import Backoff
from ftrl.worker.pipe import encode_frame, read_frame_async

log = logging.getLogger(__name__)


class ActorProcess:
    """One host process: spawned as a spare, later assigned an actor."""

    def __init__(self, proc: asyncio.subprocess.Process, ctl_w: int, reader: asyncio.StreamReader,
                 transport: asyncio.BaseTransport) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._ctl_w = ctl_w
        # `send` runs in a thread; `close` runs on the loop. The control fd is closed only
        # when no send uses it: a send that ran after its fd number was closed and reused
        # by a new spare's pipe would hand that spare another actor's assignment.
        self._ctl_lock = threading.Lock()
        self._ctl_sending = 0
        self._ctl_closing = False
        self._reader = reader
        self._transport = transport
        self.ready = asyncio.get_running_loop().create_future()
        # A spare that dies unused has nobody awaiting `ready`: mark it retrieved.
        self.ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.ready_task: asyncio.Task | None = None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def read(self) -> dict[str, Any]:
        return await read_frame_async(self._reader)

    def send(self, msg: dict[str, Any]) -> None:
        """Write one control message (blocking: call it off the event loop when large).
        Raises BrokenPipeError once the host is closed, or when the child is gone."""
        data = memoryview(encode_frame(msg))
        with self._ctl_lock:
            if self._ctl_closing:
                raise BrokenPipeError(f"actor host {self.pid} is closed")
            self._ctl_sending += 1
        try:
            os.set_blocking(self._ctl_w, True)
            while data:
                n = os.write(self._ctl_w, data)
                data = data[n:]
        finally:
            with self._ctl_lock:
                self._ctl_sending -= 1
                last = self._ctl_closing and self._ctl_sending == 0
            if last:
                self._close_ctl()

    async def wait(self) -> int:
        return await self.proc.wait()

    def signal(self, sig: int) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    async def stop(self, grace_s: float = 2.0, drain: bool = False) -> int:
        """Ask the host to end, then SIGKILL after `grace_s`; returns the exit code.

        drain=False sends SIGINT (stop now); drain=True sends SIGTERM, on which the host
        first runs the actor's `__ftrl_drain__()` (see ftrl.worker.host).
        """
        if self.proc.returncode is None:
            self.signal(signal.SIGCONT)  # a stopped process cannot handle signals
            self.signal(signal.SIGTERM if drain else signal.SIGINT)
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace_s)
            except TimeoutError:
                self.signal(signal.SIGKILL)
        code = await self.proc.wait()
        self.close()
        return code

    def close(self) -> None:
        """Release the pipes. A send still writing (a stopped child) keeps the control fd
        until it ends; the child's death ends it with EPIPE."""
        if self.ready_task is not None and not self.ready_task.done():
            self.ready_task.cancel()
        with self._ctl_lock:
            first = not self._ctl_closing
            self._ctl_closing = True
            idle = self._ctl_sending == 0
        if first and idle:
            self._close_ctl()
        self._transport.close()

    def _close_ctl(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._ctl_w)


async def spawn_host(preload: str, log_path: Path, env: dict[str, str]) -> ActorProcess:
    """Start a spare host process with two control pipes."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    try:
        out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
            os.close(fd)
        raise
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ftrl.worker.host",
            "--ctl-in", str(to_child_r), "--ctl-out", str(from_child_w), "--preload", preload,
            pass_fds=(to_child_r, from_child_w),
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            env={**os.environ, **env},
            start_new_session=False,
        )
    except BaseException:
        os.close(to_child_w)
        os.close(from_child_r)
        raise
    finally:
        os.close(out)
        os.close(to_child_r)
        os.close(from_child_w)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(from_child_r, "rb", buffering=0)
    )
    host = ActorProcess(proc, to_child_w, reader, transport)
    return host


#: What spare hosts print before an assignment: a name no actor's log can have (an actor
#: name never starts with "."), so an actor named "spares" gets a file of its own.
SPARES_LOG = ".spares.log"


class SparePool:
    """Keeps `size` warm host processes; hands one out per actor start."""

    def __init__(self, size: int, preload: str, log_dir: Path, env: dict[str, str]) -> None:
        self.size = size
        self.preload = preload
        self.log_dir = log_dir
        self.env = env
        self._spares: deque[ActorProcess] = deque()
        self._wake = asyncio.Event()
        self._backoff = Backoff(base=0.5, cap=10.0)
        self._count = 0

    async def _spawn(self) -> ActorProcess:
        self._count += 1
        host = await spawn_host(self.preload, self.log_dir / SPARES_LOG, self.env)
        host.ready_task = asyncio.get_running_loop().create_task(self._await_ready(host))
        return host

    async def _await_ready(self, host: ActorProcess) -> None:
        try:
            msg = await host.read()
            if msg.get("kind") == "ready" and not host.ready.done():
                host.ready.set_result(True)
        except (EOFError, ValueError, Exception) as e:
            if not host.ready.done():
                host.ready.set_exception(EOFError(f"spare {host.pid} died before it was ready: {e}"))

    async def acquire(self) -> ActorProcess:
        """A started host (ready or still importing); a new spare is started behind it."""
        host = None
        while self._spares:
            candidate = self._spares.popleft()
            if candidate.returncode is None:
                host = candidate
                break
            candidate.close()
        if host is None:
            host = await self._spawn()
        self._wake.set()
        return host

    async def maintain(self) -> None:
        """Refill the pool; runs until cancelled."""
        try:
            while True:
                self._spares = deque(h for h in self._spares if h.returncode is None)
                while len(self._spares) < self.size:
                    try:
                        host = await self._spawn()
                    except OSError as e:  # out of processes or fds: try again later
                        log.warning("cannot start a spare process: %s", e)
                        await asyncio.sleep(self._backoff.next_delay())
                        continue
                    self._spares.append(host)
                    try:
                        await asyncio.wait_for(asyncio.shield(host.ready), 120)
                        self._backoff.reset()
                    except (TimeoutError, EOFError) as e:
                        log.warning("spare process failed: %s (see %s)", e, self.log_dir / SPARES_LOG)
                        self._spares = deque(h for h in self._spares if h is not host)
                        host.signal(signal.SIGKILL)
                        await asyncio.sleep(self._backoff.next_delay())
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 5.0)
        finally:
            for host in self._spares:
                host.signal(signal.SIGKILL)
                host.close()
            self._spares.clear()
