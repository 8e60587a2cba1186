"""Fixtures for tests that run a real coordinator and real workers on 127.0.0.1 (the
plain helpers they use, which tests import, are in tests/cluster.py)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ftrl.client.cluster import LocalCluster
from tests.cluster import COUNTER, new_cluster

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
