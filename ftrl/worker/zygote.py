"""The spare pool's fork server ("zygote"): `python -m ftrl.worker.zygote --preload
MODULES --worker-pid PID --sock FD`.

Why: a cold spare (`python -m ftrl.worker.host`) costs a whole interpreter start plus
the imports of grpc, numpy, gymnasium...: ~0.36-0.43 CPU-s per spare measured on a
2-core machine, ~1.9 CPU-s when torch is preloaded. The pool refills a spare after
every actor start, so under chaos (an env runner SIGKILLed every second) that refill
was the largest cost of a kill. The zygote pays the imports once and then forks a
copy of itself per spare: a few ms of CPU, and the spares share its pages.

How (one process per worker, started by `SparePool`):

- it imports exactly what a cold spare imports before it says ready
  (`host.preload_modules`: the pool's preload, grpc, the actor server), says hello on
  its socket (one end of a `socketpair(AF_UNIX, SOCK_SEQPACKET)` the worker kept the
  other end of) and then serves fork requests in a plain blocking loop: one thread,
  no event loop;
- a request is one message `{"op": "fork"}` carrying, by SCM_RIGHTS, the spare's ends
  of its two control pipes and its log file (what `spawn_host` passes a cold spare);
- it *double-forks*: the intermediate child forks the spare, writes its pid on a pipe
  and exits at once; the zygote reaps the intermediate and answers `{"pid": N}`. The
  worker is a child subreaper (PR_SET_CHILD_SUBREAPER), so the orphaned spare is
  reparented to the worker, which `waitpid`s it and so sees its real exit status
  ("killed by signal SIGKILL", SIGSEGV...);
- the spare (`_become_spare`): log file on fds 1 and 2, /dev/null on 0, every other
  fd closed (the zygote's socket first, through its object), the signal dispositions
  of a fresh interpreter restored, numpy's legacy global RNG re-seeded (Python's
  `random` re-seeds itself after a fork), then it waits (2 s at most) until the worker
  is its parent, and goes on as a cold spare does after its imports:
  `host.prepare_spare()` (die with the worker, title) and `host.serve_spare()`.

Fork-safety rules. A fork copies only the calling thread: a lock held by another
thread stays locked forever in the child. So the zygote forks only while it has
exactly one OS thread (`/proc/self/task`); a preload that started a thread gets a
refusal (`"fatal": true`), and the pool falls back to cold spawns for good. The one
known thread pool started at import is OpenBLAS's (numpy): the zygote first calls
OpenBLAS's own fork handler (`blas_thread_shutdown_`, what its pthread_atfork
prepare hook runs), after which the child restarts the pool on its first BLAS call.
The zygote never initialises CUDA (nor anything else: it only imports); torch is
fork-safe before CUDA init, as DataLoader workers rely on. It ignores SIGINT and
SIGTERM (a terminal's ^C or a drain notice to the process group is for the worker),
dies with the worker (PR_SET_PDEATHSIG) or when its socket closes, and the pool
SIGKILLs it when it stops.

`ZygoteClient` is the worker's side of the protocol (asyncio).
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import functools
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

MAX_MESSAGE = 4096
FDS_PER_FORK = 3  # the spare's control-in, control-out and log fds
INTERMEDIATE_TIMEOUT_S = 10.0  # the intermediate child forks and exits at once
PARENT_WAIT_S = 2.0  # a spare waits this long at most to be adopted by the worker
START_TIMEOUT_S = 120.0  # the zygote's imports (torch included) on a busy machine
#: how long a fork waits for the thread pools it stopped to be gone (a real thread stays)
THREADS_SETTLE_S = 0.05
FORK_TIMEOUT_S = 5.0  # a fork takes milliseconds; past this the zygote is wedged (stopped?)


# ---------------------------------------------------------------- the worker's side


class ZygoteError(Exception):
    """A fork the zygote did not do. `kind`: "refused" (never ask again: fork is unsafe),
    "failed" (this fork only) or "broken" (the zygote is unusable: kill it)."""

    def __init__(self, message: str, kind: str = "broken") -> None:
        super().__init__(message)
        self.kind = kind


class ZygoteClient:
    """The worker's handle on its zygote: `start()`, `fork()`, `wait()`, `kill()`."""

    def __init__(self, proc: asyncio.subprocess.Process, sock: socket.socket) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._sock = sock
        self._lock = asyncio.Lock()
        self.in_flight = 0  # requests sent and not answered yet (the reaper waits meanwhile)

    @classmethod
    async def start(cls, preload: str, env: dict[str, str], log_path: Path,
                    timeout: float = START_TIMEOUT_S) -> ZygoteClient:
        """Start a zygote and wait (at most `timeout`) until it has imported."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "ftrl.worker.zygote", "--sock", str(theirs.fileno()),
                    "--worker-pid", str(os.getpid()), "--preload", preload,
                    pass_fds=(theirs.fileno(),), stdin=asyncio.subprocess.DEVNULL,
                    stdout=out, stderr=out, env={**os.environ, **env},
                )
            finally:
                os.close(out)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        client = cls(proc, ours)
        try:
            hello = await client._recv(timeout)
            if hello.get("kind") != "hello":
                raise ZygoteError(f"unexpected greeting {hello!r}")
        except BaseException:
            client.kill()
            raise
        return client

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        return await self.proc.wait()

    def kill(self) -> None:
        """SIGKILL it (idempotent); the socket is closed unless a request still uses it
        (that one fails and closes it)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
        if not self.in_flight:
            self._sock.close()

    async def fork(self, fds: tuple[int, int, int], timeout: float = FORK_TIMEOUT_S) -> int:
        """Ask for a spare with these fds (ctl-in, ctl-out, log); its pid. A request that
        ends without its answer (timeout, cancel) leaves the zygote broken: killed."""
        async with self._lock:
            self.in_flight += 1
            try:
                try:
                    self._sock.sendmsg([b'{"op": "fork"}'],
                                       [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                except OSError as e:
                    raise ZygoteError(f"cannot reach the fork server: {e}") from e
                reply = await self._recv(timeout)
            except BaseException:
                self.in_flight -= 1
                self.kill()
                raise
            self.in_flight -= 1
        if "error" in reply:
            raise ZygoteError(str(reply["error"]), "refused" if reply.get("fatal") else "failed")
        return int(reply["pid"])

    async def _recv(self, timeout: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                data = await loop.sock_recv(self._sock, MAX_MESSAGE)
        except TimeoutError:
            raise ZygoteError(f"the fork server did not answer within {timeout:g}s") from None
        except OSError as e:
            raise ZygoteError(f"the fork server's socket failed: {e}") from e
        if not data:
            raise ZygoteError("the fork server closed its socket (it died)")
        try:
            return json.loads(data)
        except ValueError as e:
            raise ZygoteError(f"unreadable answer from the fork server: {data[:100]!r}") from e


# ---------------------------------------------------------------- the zygote itself


def main(argv: list[str] | None = None) -> int:
    """Import the spares' modules once, then serve fork requests (see the module doc)."""
    dispositions = _signal_dispositions()  # a fresh interpreter's: what a spare gets back
    ap = argparse.ArgumentParser(prog="ftrl-zygote")
    ap.add_argument("--sock", type=int, required=True)
    ap.add_argument("--worker-pid", type=int, required=True)
    ap.add_argument("--preload", default="")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ftrl.util.runtime import die_with_parent
    from ftrl.worker import host

    die_with_parent()
    if os.getppid() != args.worker_pid:
        return 1  # the worker is gone already
    host.set_title("ftrl-spare-zygote")
    host.preload_modules(args.preload)
    sock = socket.socket(fileno=args.sock)
    return serve(sock, args.worker_pid, dispositions)


def serve(sock: socket.socket, worker_pid: int, dispositions: dict[int, Any]) -> int:
    """Say hello, then answer fork requests until the worker closes the socket."""
    if not _send(sock, {"kind": "hello", "pid": os.getpid()}):
        return 0
    while True:
        try:
            msg, ancdata, _flags, _addr = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(4 * FDS_PER_FORK))
        except OSError:  # the worker is gone
            return 0
        if not msg:
            return 0
        fds = _received_fds(ancdata)
        try:
            reply = _handle(sock, msg, fds, worker_pid, dispositions)
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        finally:
            for fd in fds:
                os.close(fd)
        if not _send(sock, reply):
            return 0


def _send(sock: socket.socket, msg: dict[str, Any]) -> bool:
    """Send one message; False when the worker is gone."""
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        return False
    return True


def _received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _handle(sock: socket.socket, msg: bytes, fds: list[int], worker_pid: int,
            dispositions: dict[int, Any]) -> dict[str, Any]:
    """One request: check that a fork is safe, then fork the spare; the answer."""
    request = json.loads(msg)
    if request.get("op") != "fork" or len(fds) != FDS_PER_FORK:
        return {"error": f"bad request {request!r} with {len(fds)} fds"}
    quiesce_thread_pools()
    threads = settled_thread_count()
    if threads != 1:
        return {"error": f"the fork server has {threads} threads (a preload module started "
                         "some): forking it is unsafe", "fatal": True}
    ctl_in, ctl_out, log_fd = fds
    sys.stdout.flush()
    sys.stderr.flush()
    pid = _double_fork(lambda: _become_spare(sock, ctl_in, ctl_out, log_fd, worker_pid, dispositions))
    return {"pid": pid}


def thread_count() -> int:
    """This process's OS threads."""
    return len(os.listdir("/proc/self/task"))


def settled_thread_count(timeout_s: float = THREADS_SETTLE_S) -> int:
    """This process's OS threads once those just told to stop (`quiesce_thread_pools`) are
    gone, waiting at most `timeout_s`: a thread on its way out keeps its /proc entry for a
    moment (seen: ~0.1 ms, once in ten), which read as a thread a preload started turned
    the fork server off for good."""
    deadline = time.monotonic() + timeout_s
    while (threads := thread_count()) != 1 and time.monotonic() < deadline:
        time.sleep(0.0005)
    return threads


def quiesce_thread_pools() -> None:
    """Stop OpenBLAS's worker threads (numpy starts them at import) the way its own
    pthread_atfork handler does before a fork; the child restarts them when needed."""
    for shutdown in _thread_pool_shutdowns():
        shutdown()


@functools.cache
def _thread_pool_shutdowns() -> list[Callable[[], int]]:
    """`blas_thread_shutdown_` of every OpenBLAS loaded (after the imports: cached)."""
    import ctypes

    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
    found = []
    for path in sorted(libs):
        with contextlib.suppress(OSError, AttributeError):
            found.append(ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY).blas_thread_shutdown_)
    return found


def _double_fork(child: Callable[[], NoReturn]) -> int:
    """Run `child` in a grandchild and return its pid; the intermediate is reaped here."""
    r, w = os.pipe()
    try:
        mid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        raise
    if mid == 0:
        _intermediate(r, w, child)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], INTERMEDIATE_TIMEOUT_S)
        data = os.read(r, 8) if ready else b""
    finally:
        os.close(r)
        if not data:
            with contextlib.suppress(ProcessLookupError):
                os.kill(mid, signal.SIGKILL)
        os.waitpid(mid, 0)
    if len(data) != 8:
        raise OSError("the intermediate child did not report a fork")
    pid = struct.unpack("q", data)[0]
    if pid < 0:
        raise OSError(-pid, os.strerror(-pid))
    return pid


def _intermediate(r: int, w: int, child: Callable[[], NoReturn]) -> NoReturn:
    """Fork the spare, report its pid (or -errno), exit: the spare is orphaned."""
    try:
        os.close(r)
        try:
            pid = os.fork()
        except OSError as e:
            pid = -(e.errno or 1)
        if pid == 0:
            os.close(w)
            child()
        os.write(w, struct.pack("q", pid))
    finally:
        os._exit(0)


def _become_spare(sock: socket.socket, ctl_in: int, ctl_out: int, log_fd: int, worker_pid: int,
                  dispositions: dict[int, Any]) -> NoReturn:
    """In the forked spare: reset what the fork shares, then continue as a cold spare
    does after its imports. Never returns."""
    code = 70
    try:
        sock.close()
        _redirect_stdio(log_fd)
        _close_fds_except({0, 1, 2, ctl_in, ctl_out})
        _restore_signals(dispositions)
        _reseed()
        if not _wait_for_parent(worker_pid, PARENT_WAIT_S):
            print(f"ftrl spare {os.getpid()}: not adopted by worker {worker_pid} (parent is "
                  f"{os.getppid()}); exiting", file=sys.stderr)
            code = 71
            return  # the finally exits
        from ftrl.worker import host

        host.prepare_spare()
        code = host.serve_spare(ctl_in, ctl_out)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _redirect_stdio(log_fd: int) -> None:
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _close_fds_except(keep: set[int]) -> None:
    """Close every open fd not in `keep`."""
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(os.sysconf("SC_OPEN_MAX")))
    for fd in fds:
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _signal_dispositions() -> dict[int, Any]:
    """The handlers set from Python now (all of a fresh interpreter's, at its start)."""
    found = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            handler = signal.getsignal(sig)
            if handler is not None:
                found[sig] = handler
    return found


def _restore_signals(dispositions: dict[int, Any]) -> None:
    for sig, handler in dispositions.items():
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, handler)


def _reseed() -> None:
    """Give the spare RNG state of its own (numpy's legacy global RNG is copied by fork;
    Python's `random` re-seeds itself in a forked child)."""
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()


def _wait_for_parent(pid: int, timeout: float) -> bool:
    """Wait (at most `timeout`) until `pid` is this process's parent: the intermediate
    child exits at once, and the worker (a subreaper) adopts this process."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while os.getppid() != pid:
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return True


if __name__ == "__main__":
    sys.exit(main())
