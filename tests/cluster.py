"""Helpers for tests that run a real coordinator and real workers on 127.0.0.1: test
settings for LocalCluster, polling, events, process checks, and `ftrl train` run in a
process group of its own. The fixtures built on them are in tests/integration/conftest.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any

import psutil

from ftrl.client.cluster import LocalCluster
from tests.procs import REPO

__all__ = ["COUNTER", "FAST", "REPO", "cluster_env", "cmdline", "event_seq", "new_cluster", "pid_gone",
           "running", "running_train", "wait_event", "wait_until"]

COUNTER = "tests.actors:Counter"

# Short timeouts so failures are noticed quickly; liveness bounds in the tests stay generous.
FAST = dict(heartbeat_interval=0.5, heartbeat_timeout=2.0, actor_hang_timeout=1.5)


def cluster_env() -> dict[str, str]:
    """Environment for cluster processes: actors import `tests.actors` from the repo root."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def new_cluster(workers: int = 1, slots: int = 2, **kwargs: Any) -> LocalCluster:
    """A LocalCluster with test settings, not started."""
    return LocalCluster(workers, slots, env=cluster_env(), **{**FAST, **kwargs})


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
               what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy (returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # keep polling; report the last error on timeout
            last_error = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}"
                                 + (f" (last error: {last_error!r})" if last_error else ""))
        time.sleep(interval)


def wait_event(client, after_seq: int, predicate: Callable[[dict], bool], timeout: float = 20.0,
               prefix: str = "", nodes: bool = False) -> dict:
    """The first event after `after_seq` that matches `predicate` (replayed or live)."""
    deadline = time.monotonic() + timeout
    seen: list[dict] = []
    events = client.events(prefix=prefix, nodes=nodes, after_seq=after_seq, timeout=timeout)
    try:
        for event in events:
            seen.append(event)
            if predicate(event):
                return event
            if time.monotonic() > deadline:
                break
    finally:
        events.close()
    summary = [(e["type"], e["actor"] or e["node_id"], e["incarnation"]) for e in seen]
    raise AssertionError(f"no matching event within {timeout:g}s; saw {summary}")


def event_seq(client) -> int:
    return client.cluster_info()["event_seq"]


def cmdline(pid: int) -> str:
    return " ".join(psutil.Process(pid).cmdline())


def pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def running(proc) -> bool:
    return proc is not None and proc.poll() is None


@contextlib.contextmanager
def running_train(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                  stdout: int | IO[Any] | None = subprocess.PIPE,
                  stderr: int | IO[Any] | None = subprocess.PIPE,
                  reap_timeout: float = 30.0) -> Iterator[subprocess.Popen]:
    """Run `argv` (`ftrl train ...`) in a session and process group of its own, as a
    terminal runs a foreground command; yields its Popen (text mode). `env` defaults to
    this environment with the repo on PYTHONPATH.

    A test that stops it on purpose (SIGINT to the group, as Ctrl-C; its driver
    SIGKILLed) does so in the block and reaps it there (`communicate`). On leaving the
    block, if the command was not reaped, its whole group is SIGKILLed and reaped
    within `reap_timeout` seconds (its pipes read and closed)."""
    environ = dict(env) if env is not None else {**os.environ, **cluster_env()}
    proc = subprocess.Popen(list(argv), env=environ, stdout=stdout, stderr=stderr, text=True,
                            start_new_session=True)
    try:
        yield proc
    finally:
        # not reaped yet, so its pid (the group's id) cannot belong to anything else
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.communicate(timeout=reap_timeout)
            except subprocess.TimeoutExpired:  # a pipe held open by another process
                proc.wait(reap_timeout)
