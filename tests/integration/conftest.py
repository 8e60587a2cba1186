"""Fixtures for tests that run a real coordinator and real workers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ftrl.client.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
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


# ---------------------------------------------------------------- failure reports


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    item.stash.setdefault(_FAILED, False)
    if report.failed:
        item.stash[_FAILED] = True
    return report


_FAILED = pytest.StashKey[bool]()


def _dump_logs(cluster: LocalCluster) -> None:
    """Print the tail of every log of a cluster (called when a test failed)."""
    for path in sorted(cluster.state_dir.rglob("*.log")):
        with contextlib.suppress(OSError):
            lines = path.read_text(errors="replace").splitlines()[-40:]
            print(f"----- {path.relative_to(cluster.state_dir)} -----", file=sys.stderr)
            print("\n".join(lines), file=sys.stderr)


@contextlib.contextmanager
def _owned(clusters: list[LocalCluster], failed: Callable[[], bool]) -> Iterator[None]:
    try:
        yield
    finally:
        for cluster in clusters:
            if failed():
                _dump_logs(cluster)
            cluster.stop()


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def make_cluster(request) -> Iterator[Callable[..., LocalCluster]]:
    """Start clusters of one's own (for tests that kill workers or the coordinator)."""
    clusters: list[LocalCluster] = []

    def make(workers: int = 1, slots: int = 2, **kwargs: Any) -> LocalCluster:
        cluster = new_cluster(workers, slots, **kwargs)
        clusters.append(cluster)
        return cluster.start()

    with _owned(clusters, lambda: request.node.stash.get(_FAILED, False)):
        yield make


@pytest.fixture(scope="module")
def shared_cluster(request) -> Iterator[LocalCluster]:
    """One cluster (2 workers x 4 slots) shared by the tests of a module that do not
    kill workers or the coordinator."""
    cluster = new_cluster(workers=2, slots=4)
    failures_before = request.session.testsfailed
    with _owned([cluster], lambda: request.session.testsfailed > failures_before):
        cluster.start()
        yield cluster


@pytest.fixture
def client(shared_cluster):
    return shared_cluster.client()


@pytest.fixture
def actors(client) -> Iterator[Callable[..., Any]]:
    """Create actors on the shared cluster; they are killed after the test."""
    names: list[str] = []

    def create(name: str, class_path: str = COUNTER, **kwargs: Any):
        names.append(name)
        return client.create_actor(class_path, name=name, **kwargs)

    yield create
    for name in names:
        with contextlib.suppress(Exception):
            client.kill_actor(name, "test finished")
