"""Actor processes as the worker sees them, and the pool of warm spares.

The worker learns of a child's exit from the event loop's child watcher (a
SIGCHLD-driven wait), so a death is noticed at once, not by polling.

The pool's preload spec (`ftrl worker --preload`) is `MODULES[;first:MODULES]`, each
MODULES a comma-separated list: every spare imports the first list ahead; with
`first:` one more spare, started at once beside them and never refilled, imports the
second list and goes to the worker's first actor. An embedded cluster whose first actor
is known uses it: `ftrl train`'s is the job's driver, which needs torch while its env
runners (numpy inference) do not, so only that one process loads torch, and does so
while the cluster is still starting.
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


def parse_preload(spec: str) -> tuple[str, str]:
    """(modules of every spare, modules of the first actor's spare) of a preload spec
    `MODULES[;first:MODULES]`; ValueError for another part after the `;`."""
    common, _, rest = spec.partition(";")
    first = ""
    for part in filter(None, (p.strip() for p in rest.split(";"))):
        key, sep, modules = part.partition(":")
        if not sep or key.strip() != "first":
            raise ValueError(f"preload part {part!r} is not first:MODULES")
        first = modules.strip()
    return common.strip(), first


#: What spare hosts print before an assignment: a name no actor's log can have (an actor
#: name never starts with "."), so an actor named "spares" gets a file of its own.
SPARES_LOG = ".spares.log"


class SparePool:
    """Keeps `size` warm host processes; hands one out per actor start."""

    def __init__(self, size: int, preload: str, log_dir: Path, env: dict[str, str]) -> None:
        self.size = size
        self.preload, self.first_preload = parse_preload(preload)
        self.log_dir = log_dir
        self.env = env
        self._spares: deque[ActorProcess] = deque()
        self._first: ActorProcess | None = None  # the first actor's spare, until taken
        self._first_used = not self.first_preload
        self._wake = asyncio.Event()
        self._backoff = Backoff(base=0.5, cap=10.0)
        self._count = 0

    async def _spawn(self, preload: str | None = None) -> ActorProcess:
        self._count += 1
        host = await spawn_host(self.preload if preload is None else preload, self.log_dir / SPARES_LOG,
                                self.env)
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
        """A started host (ready or still importing); a new spare is started behind it.
        The first call gets the first actor's spare (see the module doc) if it lives."""
        host = None
        if not self._first_used:
            self._first_used = True
            first, self._first = self._first, None
            if first is not None and first.returncode is None:
                return first  # not a pool spare: nothing to refill
            if first is not None:
                first.close()
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
        """Refill the pool; runs until cancelled. The first actor's spare (if any) is
        started first, and the pool's spares beside it without waiting for it."""
        try:
            if not self._first_used:
                try:
                    first = await self._spawn(self.first_preload)
                except OSError as e:  # the first actor takes a pool spare instead
                    log.warning("cannot start the first actor's spare process: %s", e)
                    self._first_used = True
                else:
                    if self._first_used:  # the first actor came while it was spawned
                        first.signal(signal.SIGKILL)
                        first.close()
                    else:
                        self._first = first
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
                        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
                        # cancel that comes as the wait ends, and the pool never stops
                        async with asyncio.timeout(120):
                            await asyncio.shield(host.ready)
                        self._backoff.reset()
                    except (TimeoutError, EOFError) as e:
                        log.warning("spare process failed: %s (see %s)", e, self.log_dir / SPARES_LOG)
                        self._spares = deque(h for h in self._spares if h is not host)
                        host.signal(signal.SIGKILL)
                        await asyncio.sleep(self._backoff.next_delay())
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        await self._wake.wait()
        finally:
            unused = [*self._spares, *([self._first] if self._first is not None else [])]
            for host in unused:
                host.signal(signal.SIGKILL)
                host.close()
            self._spares.clear()
            self._first = None
