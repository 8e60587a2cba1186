"""Actor processes as the worker sees them, and the pool of warm spares.

The worker learns of a child's exit from the event loop's child watcher (a
SIGCHLD-driven wait) or, for a forked spare, from its pidfd: a death is noticed at
once, not by polling.

The pool's preload spec (`ftrl worker --preload`) is `MODULES[;first:MODULES]`, each
MODULES a comma-separated list: every spare imports the first list ahead; with
`first:` one more spare, started at once beside them and never refilled, imports the
second list and goes to the worker's first actor. An embedded cluster whose first actor
is known uses it: `ftrl train`'s is the job's driver, which needs torch while its env
runners (numpy inference) do not, so only that one process loads torch, and does so
while the cluster is still starting.

Spares by fork. A cold spare (`spawn_host`: `python -m ftrl.worker.host`) costs an
interpreter start plus its imports, ~0.4 CPU-s (~1.9 with torch) on a 2-core machine,
and the pool pays it again after every actor start: under chaos (an env runner
SIGKILLed every second) that refill was the largest cost of a kill. So the pool runs
a fork server (`ftrl.worker.zygote`) that imported the pool's preload once, and gets
its spares from it by `fork()` (`fork_host`). The first actor's spare (`first:`) stays
a cold spawn: it imports other modules (torch) than the zygote. How the spare becomes
the worker's child: the worker is a child subreaper (PR_SET_CHILD_SUBREAPER), the
zygote double-forks, and the orphaned spare is reparented to the worker, which waits
for it as an `AdoptedProcess` (pidfd + `waitpid(pid, WNOHANG)`; libuv and asyncio only
wait for the pids they spawned) and so reports its real exit status. When the zygote
is unavailable (it failed to start, died, or any error) the pool cold-spawns and logs
why once per outage; a dead zygote is started again with backoff. One that refuses to
fork (it has threads other than its main one: unsafe, see the zygote's doc) is given
up for good. `FTRL_NO_ZYGOTE=1` turns the fork server off (cold spawns only, and the
worker stays no subreaper).

Orphans. A subreaper inherits every orphaned descendant (the sub-env processes of a
runner that was SIGKILLed...). Every second the pool lists the worker's children and
reaps the zombies among them that nobody else waits for (`OrphanReaper`): never
`waitpid(-1)`, never a pid the pool spawned (asyncio/libuv wait for those) or adopted.
Running orphans are left alone: their own pipes or PR_SET_PDEATHSIG end them.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ftrl.util.backoff import Backoff
from ftrl.util.runtime import set_child_subreaper
from ftrl.worker.pipe import encode_frame, read_frame_async
from ftrl.worker.zygote import ZygoteClient, ZygoteError

log = logging.getLogger(__name__)


class ActorProcess:
    """One host process: spawned as a spare, later assigned an actor."""

    def __init__(self, proc: asyncio.subprocess.Process | AdoptedProcess, ctl_w: int,
                 reader: asyncio.StreamReader, transport: asyncio.BaseTransport,
                 forked: bool = False) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.forked = forked  # made by the fork server (an AdoptedProcess), not spawned
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


class AdoptedProcess:
    """A child this process did not spawn (a forked spare that the worker, a subreaper,
    adopted), with `asyncio.subprocess.Process`'s `pid`, `returncode` (-signum for a
    signal), `wait()` and `send_signal()`. Its exit is seen through a pidfd on the
    event loop (a thread blocked in `waitpid` where pidfds are missing)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = self._loop.create_future()
        self._pidfd = -1
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # Linux < 5.3
            threading.Thread(target=self._wait_blocking, name=f"wait-{pid}", daemon=True).start()
        else:
            self._loop.add_reader(self._pidfd, self._poll)

    def _poll(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self._lost()
            return
        if pid:
            self._set_exited(os.waitstatus_to_exitcode(status))

    def _wait_blocking(self) -> None:
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            code = None
        else:
            code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self._lost if code is None else self._set_exited, code)

    def _lost(self, _code: object = None) -> None:
        log.warning("process %d was reaped elsewhere: its exit status is unknown", self.pid)
        self._set_exited(255)

    def _set_exited(self, code: int) -> None:
        if self.returncode is not None:
            return
        self.returncode = code
        if self._pidfd >= 0:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        self._exited.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, sig: int) -> None:
        """Signal it while it runs (ProcessLookupError once it is gone)."""
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        if self._pidfd >= 0:
            signal.pidfd_send_signal(self._pidfd, sig)
        else:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _open_pipes(log_path: Path) -> tuple[int, int, int, int, int]:
    """(child's ctl-in, our end of it, our end of ctl-out, child's ctl-out, log fd)."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    try:
        out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
            os.close(fd)
        raise
    return to_child_r, to_child_w, from_child_r, from_child_w, out


async def _start_host(start: Callable[[int, int, int], Awaitable[asyncio.subprocess.Process | AdoptedProcess]],
                      log_path: Path) -> ActorProcess:
    """Open a spare's control pipes and log file, have `start(ctl_in, ctl_out, log_fd)`
    start the process that gets the child's ends, keep ours: the spare as an ActorProcess."""
    to_child_r, to_child_w, from_child_r, from_child_w, out = _open_pipes(log_path)
    try:
        proc = await start(to_child_r, from_child_w, out)
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
    return ActorProcess(proc, to_child_w, reader, transport, forked=isinstance(proc, AdoptedProcess))


async def spawn_host(preload: str, log_path: Path, env: dict[str, str]) -> ActorProcess:
    """Start a cold spare host process with two control pipes."""

    async def start(ctl_in: int, ctl_out: int, out: int) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ftrl.worker.host",
            "--ctl-in", str(ctl_in), "--ctl-out", str(ctl_out), "--preload", preload,
            pass_fds=(ctl_in, ctl_out),
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            env={**os.environ, **env},
            start_new_session=False,
        )

    return await _start_host(start, log_path)


async def fork_host(zygote: ZygoteClient, log_path: Path) -> ActorProcess:
    """A spare forked by the fork server and adopted by this process (see the module
    doc). ZygoteError when the zygote did not give one."""

    async def start(ctl_in: int, ctl_out: int, out: int) -> AdoptedProcess:
        pid = await zygote.fork((ctl_in, ctl_out, out))
        if parent_pid(pid) != os.getpid():  # not ours to wait for: never use it
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            raise ZygoteError(f"the forked spare {pid} was not adopted by this worker (is it "
                              "a child subreaper?)", "refused")
        return AdoptedProcess(pid)

    return await _start_host(start, log_path)


# ---------------------------------------------------------------- orphans


def parent_pid(pid: int) -> int:
    """The parent of `pid` (0 when it is gone)."""
    stat = _stat(pid)
    return int(stat[1]) if stat else 0


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: state, ppid... ([] if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def child_pids() -> set[int]:
    """This process's children (zombies included): /proc/self/task/*/children, or a
    scan of every /proc/PID/stat where that file is missing (CONFIG_PROC_CHILDREN)."""
    me = os.getpid()
    if os.path.exists(f"/proc/self/task/{me}/children"):
        pids: set[int] = set()
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that just ended
                with open(f"/proc/self/task/{tid}/children") as f:
                    pids.update(int(p) for p in f.read().split())
        return pids
    return {int(e) for e in os.listdir("/proc") if e.isdigit() and parent_pid(int(e)) == me}


class OrphanReaper:
    """Reaps the zombies among this process's children that nobody else waits for:
    orphans adopted as a subreaper. `owned` holds the pids someone waits for (asyncio's
    children, adopted spares); a zombie is reaped when two scans in a row saw it, so a
    child that someone is about to wait for (spawned, not yet in `owned`) is left to them."""

    def __init__(self) -> None:
        self.owned: set[int] = set()
        self._suspects: set[int] = set()

    def scan(self, pause: bool = False) -> list[int]:
        """One round; `pause` skips the reaping (a fork is in flight). The pids reaped."""
        children = child_pids()
        self.owned &= children  # those gone were reaped by whoever owned them
        zombies = {pid for pid in children - self.owned if _stat(pid)[:1] == ["Z"]}
        if pause:
            self._suspects = set()
            return []
        due, self._suspects = zombies & self._suspects, zombies - self._suspects
        reaped = []
        for pid in sorted(due):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    reaped.append(pid)
        return reaped


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


#: How often the pool reaps orphaned zombies (see OrphanReaper).
REAP_INTERVAL_S = 1.0
#: How long a spare request waits for a zygote that is starting, before a cold spawn.
ZYGOTE_WAIT_S = 30.0


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


async def _reap(procs: list[ActorProcess | ZygoteClient], timeout: float) -> None:
    """Wait (at most `timeout`) for killed processes to be reaped: no zombies left."""
    waits = [asyncio.ensure_future(p.wait()) for p in procs]
    if waits:
        _, pending = await asyncio.wait(waits, timeout=timeout)
        for w in pending:
            w.cancel()


class SparePool:
    """Keeps `size` warm host processes; hands one out per actor start. `fork_server`
    (default: on unless FTRL_NO_ZYGOTE=1) gets them from a zygote (see the module doc)."""

    def __init__(self, size: int, preload: str, log_dir: Path, env: dict[str, str],
                 fork_server: bool | None = None) -> None:
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
        if fork_server is None:
            fork_server = os.environ.get("FTRL_NO_ZYGOTE", "") != "1"
        self.fork_server = fork_server
        self._zygote: ZygoteClient | None = None
        self._zygote_starting: asyncio.Future | None = None  # done once a start ended
        self._zygote_waited_out: asyncio.Future | None = None  # a start waited for in vain
        self._zygote_backoff = Backoff(base=1.0, cap=30.0)
        self._fork_off = ""  # why the pool gave up forking for good
        self._fork_down = ""  # why forking is unavailable now ("" while it works)
        self._reaper = OrphanReaper()

    @property
    def zygote_pid(self) -> int | None:
        """The pid of the live fork server, if any."""
        z = self._zygote
        return z.pid if z is not None and z.returncode is None else None

    @property
    def spare_pids(self) -> list[int]:
        """The pids of the spares waiting in the pool."""
        return [h.pid for h in self._spares]

    async def _spawn(self, preload: str | None = None) -> ActorProcess:
        """A new spare: forked when it is a pool spare and the zygote is up, else cold."""
        self._count += 1
        host = await self._fork() if preload is None else None
        if host is None:
            host = await spawn_host(self.preload if preload is None else preload,
                                    self.log_dir / SPARES_LOG, self.env)
        self._reaper.owned.add(host.pid)
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

    # ------------------------------------------------------------ the fork server

    async def _fork(self) -> ActorProcess | None:
        """A spare from the zygote; None (a cold spawn then) when it is not available."""
        zygote = await self._live_zygote()
        if zygote is None:
            return None
        try:
            host = await fork_host(zygote, self.log_dir / SPARES_LOG)
        except ZygoteError as e:
            if e.kind == "refused":
                self._fork_off = str(e)
                log.warning("fork server: %s; spares are cold spawns from now on", e)
                zygote.kill()
            else:
                if e.kind == "broken":
                    zygote.kill()  # its answers may be out of step: the keeper starts another
                self._fork_unavailable(f"a fork failed: {e}")
            return None
        self._zygote_backoff.reset()
        if self._fork_down:
            log.info("fork server %d forks again (after: %s)", zygote.pid, self._fork_down)
            self._fork_down = ""
        return host

    async def _live_zygote(self) -> ZygoteClient | None:
        """The zygote when it can fork; a start in progress is waited for (bounded)."""
        if not self.fork_server or self._fork_off:
            return None
        starting = self._zygote_starting
        if (self._zygote is None and starting is not None and not starting.done()
                and starting is not self._zygote_waited_out):
            await asyncio.wait({starting}, timeout=ZYGOTE_WAIT_S)
            if not starting.done():  # a wedged start: later spares do not wait for it
                self._zygote_waited_out = starting
        zygote = self._zygote
        if zygote is None or zygote.returncode is not None or self._fork_off:
            return None
        return zygote

    def _fork_unavailable(self, why: str) -> None:
        """Log the first reason of an outage (cold spawns meanwhile), once."""
        if not self._fork_down:
            log.warning("fork server unavailable: %s; spares are cold spawns until it is back", why)
            self._fork_down = why

    def _start_fork_server(self) -> list[asyncio.Task]:
        """Become a subreaper, then keep a zygote and reap orphans (tasks to cancel)."""
        if not set_child_subreaper():
            self._fork_off = "cannot become a child subreaper (PR_SET_CHILD_SUBREAPER)"
            log.warning("fork server off: %s; spares are cold spawns", self._fork_off)
            return []
        loop = asyncio.get_running_loop()
        self._zygote_starting = loop.create_future()  # spares asked for from now wait for it
        return [loop.create_task(self._keep_zygote()), loop.create_task(self._reap_orphans())]

    async def _keep_zygote(self) -> None:
        """Run the zygote; start it again (with backoff) whenever it dies, until it
        is given up for good."""
        while not self._fork_off:
            try:
                await self._run_zygote_once()
            except Exception as e:  # a bug here must not leave spares waiting for it
                log.exception("the fork server's keeper failed")
                self._fork_off = f"its keeper failed: {e!r}"
                if self._zygote is not None:
                    self._zygote.kill()
                return
            if not self._fork_off:
                await asyncio.sleep(self._zygote_backoff.next_delay())

    async def _run_zygote_once(self) -> None:
        """Start a zygote and return once it died (or did not start)."""
        if self._zygote_starting is None or self._zygote_starting.done():
            self._zygote_starting = asyncio.get_running_loop().create_future()
        try:
            zygote = await ZygoteClient.start(self.preload, self.env, self.log_dir / SPARES_LOG)
        except (ZygoteError, OSError) as e:
            self._fork_unavailable(f"it did not start: {e} (see {self.log_dir / SPARES_LOG})")
            return
        finally:
            if not self._zygote_starting.done():
                self._zygote_starting.set_result(None)
        self._reaper.owned.add(zygote.pid)
        self._zygote = zygote
        log.info("fork server %d ready (preload %r)", zygote.pid, self.preload)
        code = await zygote.wait()
        self._zygote = None
        zygote.kill()  # closes its socket
        if not self._fork_off:
            self._fork_unavailable(f"it {_exit_text(code)}")

    async def _reap_orphans(self) -> None:
        """Reap orphaned zombies every REAP_INTERVAL_S (see OrphanReaper)."""
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            zygote = self._zygote
            try:
                for pid in self._reaper.scan(pause=zygote is not None and zygote.in_flight > 0):
                    log.debug("reaped orphaned process %d", pid)
            except Exception:  # never let reaping stop for good
                log.exception("reaping orphaned processes failed")

    # ------------------------------------------------------------ the pool

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
        """Refill the pool; runs until cancelled. The fork server and the first actor's
        spare (if any, a cold one) are started first, and the pool's spares beside them
        without waiting for the first one."""
        side_tasks: list[asyncio.Task] = []
        try:
            if self.fork_server:  # from now on, spares asked for wait for its start
                side_tasks = self._start_fork_server()
            if not self._first_used:
                await self._spawn_first()
            while True:
                self._spares = deque(h for h in self._spares if h.returncode is None)
                while len(self._spares) < self.size:
                    await self._refill_one()
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        await self._wake.wait()
        finally:
            for task in side_tasks:
                task.cancel()
            killed: list[ActorProcess | ZygoteClient] = []
            if self._zygote is not None:
                self._zygote.kill()
                killed.append(self._zygote)
                self._zygote = None
            unused = [*self._spares, *([self._first] if self._first is not None else [])]
            for host in unused:
                host.signal(signal.SIGKILL)
                host.close()
            self._spares.clear()
            self._first = None
            await asyncio.gather(*side_tasks, return_exceptions=True)
            await _reap([*killed, *unused], timeout=5.0)

    async def _spawn_first(self) -> None:
        try:
            first = await self._spawn(self.first_preload)
        except OSError as e:  # the first actor takes a pool spare instead
            log.warning("cannot start the first actor's spare process: %s", e)
            self._first_used = True
            return
        if self._first_used:  # the first actor came while it was spawned
            first.signal(signal.SIGKILL)
            first.close()
        else:
            self._first = first

    async def _refill_one(self) -> None:
        """Start one spare and wait until it is ready (backoff after a failure)."""
        try:
            host = await self._spawn()
        except OSError as e:  # out of processes or fds: try again later
            log.warning("cannot start a spare process: %s", e)
            await asyncio.sleep(self._backoff.next_delay())
            return
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
