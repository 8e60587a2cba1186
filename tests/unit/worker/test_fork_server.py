"""The spare pool's fork server (`ftrl.worker.zygote`) with real processes: forked
spares say ready, serve an actor and their real exit statuses reach the pool's process
(a child subreaper); a preload that starts a thread makes the pool cold-spawn for good;
a killed zygote means cold spawns until it is back; orphaned zombies are reaped, and
the pool's own children never are."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ftrl.util.runtime import run_async, set_child_subreaper
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.worker.processes import ActorProcess, OrphanReaper, SparePool, child_pids, parent_pid
from ftrl.worker.zygote import FORK_TIMEOUT_S
from tests.cluster import cluster_env

POOL_LOG = "ftrl.worker.processes"


@pytest.fixture(autouse=True)
def subreaper() -> Iterator[None]:
    """The pool makes this (pytest's) process a subreaper: undo it after each test."""
    yield
    set_child_subreaper(False)


def _assign(name: str, class_path: str, log_path: Path) -> dict[str, Any]:
    spec = pb.ActorSpec(name=name, class_path=class_path)
    return {"kind": "assign", "spec": spec.SerializeToString(), "incarnation": 1, "restarts": 0,
            "node_id": "unit", "coordinator": "", "bind_host": "127.0.0.1", "env": {},
            "log_path": str(log_path), "log_level": "WARNING", "name": name}


async def _until(predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)
    return value


async def _pooled(pool: SparePool, body: Callable[[], Any]) -> None:
    """Run `body()` while the pool maintains itself; stop the pool after."""
    task = asyncio.create_task(pool.maintain())
    await asyncio.sleep(0)  # the pool starts its fork server: spares asked for wait for it
    try:
        async with asyncio.timeout(60):
            await body()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _start_actor(host: ActorProcess, name: str, class_path: str, log_dir: Path) -> dict:
    async with asyncio.timeout(30):
        await host.ready
        await asyncio.to_thread(host.send, _assign(name, class_path, log_dir / f"{name}.log"))
        return await host.read()


def test_forked_spares_serve_actors_and_their_real_exit_statuses_are_seen(tmp_path):
    pool = SparePool(1, "", tmp_path, cluster_env(), fork_server=True)
    pool_pids: set[int] = set()

    async def body() -> None:
        served = await pool.acquire()
        assert served.forked and parent_pid(served.pid) == os.getpid()
        started = await _start_actor(served, "a", "tests.actors:Counter", tmp_path)
        assert started["kind"] == "started" and started["pid"] == served.pid
        async with grpc.aio.insecure_channel(f"127.0.0.1:{started['port']}") as channel:
            pong = await pb_grpc.ActorStub(channel).Ping(pb.PingRequest(incarnation=1), timeout=10)
        assert pong.incarnation == 1
        served.signal(signal.SIGKILL)
        assert await served.wait() == -signal.SIGKILL

        failed = await pool.acquire()
        assert failed.forked
        msg = await _start_actor(failed, "b", "tests.actors:BadInit", tmp_path)
        assert msg["kind"] == "start_failed" and "BadInit refuses" in msg["message"]
        assert await failed.wait() == 3

        segv = await pool.acquire()
        await segv.ready
        segv.signal(signal.SIGSEGV)
        assert await segv.wait() == -signal.SIGSEGV

        unused = await pool.acquire()
        await unused.ready
        unused.close()  # the worker lets it go before any assignment: it exits 0
        assert await unused.wait() == 0
        for host in (served, failed, segv, unused):
            host.close()
        await _until(lambda: pool.spare_pids and pool.zygote_pid)  # the refill is in
        pool_pids.update(pool.spare_pids, {pool.zygote_pid})

    run_async(_pooled(pool, body))
    # the stopped pool killed and reaped its spare and its zygote (other zombies may be
    # orphans of earlier tests' processes, adopted while this process was a subreaper)
    assert not pool_pids & child_pids()


def test_a_preload_that_starts_a_thread_makes_the_pool_cold_spawn_for_good(tmp_path, caplog):
    caplog.set_level(logging.INFO, POOL_LOG)
    pool = SparePool(1, "tests.threads_at_import", tmp_path, cluster_env(), fork_server=True)

    async def body() -> None:
        hosts = [await pool.acquire() for _ in range(3)]
        assert not any(h.forked for h in hosts)
        for host in hosts:
            await host.ready
            host.close()
        await _until(lambda: pool.zygote_pid is None)

    run_async(_pooled(pool, body))
    refusals = [r.getMessage() for r in caplog.records if "cold spawns from now on" in r.getMessage()]
    assert len(refusals) == 1 and "threads" in refusals[0], refusals


def test_a_killed_zygote_means_cold_spawns_until_it_is_back(tmp_path, caplog):
    caplog.set_level(logging.INFO, POOL_LOG)
    pool = SparePool(0, "", tmp_path, cluster_env(), fork_server=True)

    async def body() -> None:
        first = await pool.acquire()
        assert first.forked
        zygote = pool.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGKILL)
        await _until(lambda: pool.zygote_pid != zygote)
        cold = await pool.acquire()  # at once: the zygote is restarted after a backoff
        assert not cold.forked
        await _until(lambda: pool.zygote_pid not in (None, zygote))
        again = await pool.acquire()
        assert again.forked
        for host in (first, cold, again):
            await host.ready
            host.close()
            assert await host.wait() == 0

    run_async(_pooled(pool, body))
    outages = [r.getMessage() for r in caplog.records if "fork server unavailable" in r.getMessage()]
    assert len(outages) == 1 and "SIGKILL" in outages[0], outages


def _state(pid: int) -> str:
    """The process's state letter (R, S, T, Z, ...), or "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_a_hung_zygote_is_killed_at_the_fork_timeout_and_forks_come_back(tmp_path, caplog):
    """A fork server that hangs (SIGSTOPped) costs one fork timeout: that spare is a cold
    spawn, the hung zygote is killed, not left stopped, and a new one forks again."""
    caplog.set_level(logging.INFO, POOL_LOG)
    pool = SparePool(0, "", tmp_path, cluster_env(), fork_server=True)

    async def body() -> None:
        first = await pool.acquire()
        assert first.forked
        zygote = pool.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGSTOP)
        t0 = time.monotonic()
        cold = await pool.acquire()
        took = time.monotonic() - t0
        assert not cold.forked
        assert FORK_TIMEOUT_S - 0.5 <= took < FORK_TIMEOUT_S + 10, took
        await _until(lambda: _state(zygote) in ("", "Z"))  # killed (the keeper reaps it)
        await _until(lambda: pool.zygote_pid not in (None, zygote))
        again = await pool.acquire()
        assert again.forked
        for host in (first, cold, again):
            await host.ready
            host.close()
            assert await host.wait() == 0

    run_async(_pooled(pool, body))
    outages = [r.getMessage() for r in caplog.records if "fork server unavailable" in r.getMessage()]
    assert len(outages) == 1 and "did not answer" in outages[0], outages


def test_orphaned_zombies_are_reaped_and_owned_children_never_are():
    assert set_child_subreaper(True)
    reaper = OrphanReaper()
    owned = subprocess.Popen(["true"])
    reaper.owned.add(owned.pid)
    # sh starts a background sleep and exits at once: the sleep is orphaned to us
    sh = subprocess.Popen(["sh", "-c", "sleep 0.2 & echo $!"], stdout=subprocess.PIPE, text=True)
    orphan = int(sh.communicate(timeout=10)[0])
    assert parent_pid(orphan) == os.getpid()
    deadline = time.monotonic() + 10
    reaped: list[int] = []
    while orphan not in reaped and time.monotonic() < deadline:
        reaped += reaper.scan()
        time.sleep(0.1)
    assert orphan in reaped and parent_pid(orphan) == 0
    assert owned.pid not in reaped
    assert owned.wait(timeout=10) == 0  # still ours to wait for, with its real status


_THREAD_PROBE = """
import threading, time
from ftrl.worker.zygote import settled_thread_count
leaving = threading.Thread(target=time.sleep, args=(0.02,))
leaving.start()
on_its_way_out = settled_thread_count(timeout_s=5.0)
staying = threading.Event()
threading.Thread(target=staying.wait, daemon=True).start()
print(on_its_way_out, settled_thread_count(timeout_s=0.05))
"""


def test_a_thread_on_its_way_out_is_waited_for_and_a_live_one_is_counted():
    """The zygote forks only with one thread: one that is ending is waited for (bounded),
    one that stays is counted (and the fork refused)."""
    out = subprocess.run([sys.executable, "-c", _THREAD_PROBE], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **cluster_env()})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "2"]
