"""Worker drain: SIGTERM (a pre-emption notice) moves the actors away gracefully.

Real `ftrl coordinator` and `ftrl worker` processes. On the first SIGTERM the worker
tells the coordinator (Drain), actors run their `__ftrl_drain__` and stop, the worker
exits 0; without a coordinator it drains them itself. A second SIGTERM, or the drain
timeout, stops everything at once. The StopActor(drain=True) path is also driven
directly on a node agent in this process (no coordinator needed for it)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import ftrl
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.security import Security
from ftrl.worker.agent import NodeAgent, WorkerOptions
from tests import procs
from tests.cluster import pid_gone, wait_until

DRAINABLE = "tests.actors:Drainable"
COUNTER = "tests.actors:Counter"


@dataclass
class Node:
    """One coordinator and one worker, started by hand."""

    tmp: Path
    coordinator: subprocess.Popen
    worker: subprocess.Popen
    address: str
    token: str

    @property
    def worker_log(self) -> Path:
        return self.tmp / "worker.log"

    def client(self) -> ftrl.Client:
        return ftrl.Client(self.address, security=Security(token=self.token), timeout=10.0)

    def kill_coordinator(self) -> None:
        """SIGKILL the coordinator and wait until the worker noticed."""
        self.coordinator.kill()
        self.coordinator.wait(10)
        wait_until(lambda: "coordinator link down" in self.worker_log.read_text(), 30,
                   what="the worker to notice the coordinator is gone")

    def wait_worker_exit(self, timeout: float) -> tuple[int, float]:
        """The worker's exit code and how long it took to exit from now."""
        t0 = time.monotonic()
        try:
            code = self.worker.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker did not exit within {timeout:g}s:\n"
                                 f"{procs.tail(self.worker_log)}") from None
        return code, time.monotonic() - t0


@pytest.fixture
def node(tmp_path) -> Iterator[callable]:
    started: list[subprocess.Popen] = []

    def start(drain_timeout: float = 20.0) -> Node:
        environ = procs.env(FTRL_HOME=str(tmp_path / "home"))
        port_file = tmp_path / "port"
        coordinator = procs.start(procs.ftrl(
            "coordinator", "--port", "0", "--port-file", str(port_file),
            "--heartbeat-interval", "0.5", "--heartbeat-timeout", "2"),
            tmp_path / "coordinator.log", environ)
        started.append(coordinator)
        port = procs.wait_port(port_file, coordinator, tmp_path / "coordinator.log")
        address = f"127.0.0.1:{port}"
        token = (tmp_path / "home" / "tokens" / f"loopback-{port}.token").read_text().strip()
        argv = procs.ftrl("worker", "--coordinator", address, "--node-id", "spot-0", "--slots", "4",
                          "--spares", "1", "--log-dir", str(tmp_path / "logs"),
                          "--drain-timeout", str(drain_timeout))
        with open(tmp_path / "worker.log", "ab") as log:  # its own process group, as under systemd
            worker = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                      env=environ, start_new_session=True)
        started.append(worker)
        n = Node(tmp_path, coordinator, worker, address, token)
        with n.client() as c:
            wait_until(lambda: [(x["node_id"], x["state"]) for x in c.nodes()] == [("spot-0", "ALIVE")],
                       60, what="the worker to join")
        return n

    try:
        yield start
    finally:
        procs.stop(*reversed(started))


def _actor_pids(n: Node, *specs: tuple[str, str, dict]) -> list[int]:
    """Create actors (name, class path, kwargs) and return their process ids."""
    with n.client() as c:
        handles = [c.create_actor(cls, name=name, kwargs=kw) for name, cls, kw in specs]
        return [h.call("pid") for h in handles]


def test_sigterm_drains_actors_and_exits(node, tmp_path):
    """With the coordinator up, it is the coordinator that stops the actors (drain=True):
    the hook runs, the worker exits 0 long before it would drain them itself (at half
    its drain timeout)."""
    n = node(drain_timeout=20.0)
    marker = tmp_path / "drained"
    pids = _actor_pids(n, ("a/drainable", DRAINABLE, {"marker": str(marker), "drain_s": 0.3}),
                       ("a/plain", COUNTER, {}))
    n.worker.send_signal(signal.SIGTERM)
    code, took = n.wait_worker_exit(45)
    assert code == 0, procs.tail(n.worker_log)
    assert took < 10, took
    assert "here myself" not in n.worker_log.read_text()
    assert marker.read_text().split()[:2] == ["a/drainable", "1"]
    assert all(pid_gone(p) for p in pids)
    log = n.worker_log.read_text()
    assert "draining (the worker got SIGTERM)" in log and "drained in" in log, log
    assert "Traceback" not in log


def test_sigterm_without_a_coordinator_drains_by_itself(node, tmp_path):
    n = node(drain_timeout=30.0)
    marker = tmp_path / "drained"
    pids = _actor_pids(n, ("b/drainable", DRAINABLE, {"marker": str(marker), "drain_s": 0.5}),
                       ("b/plain", COUNTER, {}))
    n.kill_coordinator()
    n.worker.send_signal(signal.SIGTERM)
    code, took = n.wait_worker_exit(20)
    assert code == 0, procs.tail(n.worker_log)
    assert took < 10, took  # it waited neither for the coordinator nor for the timeout
    assert marker.read_text().split()[:2] == ["b/drainable", "1"]
    assert all(pid_gone(p) for p in pids)
    log = n.worker_log.read_text()
    assert "the coordinator is unreachable: draining the 2 actors here myself" in log, log
    actor_log = (tmp_path / "logs" / "b_drainable.log").read_text()
    assert "__ftrl_drain__ finished" in actor_log, actor_log
    assert "it has no __ftrl_drain__" in (tmp_path / "logs" / "b_plain.log").read_text()


def test_sigterm_to_the_whole_process_group(node, tmp_path):
    """systemd (KillMode=control-group) and SLURM signal every process of the node: the
    actors drain on their own at the same time as the worker, which counts them drained
    (not crashed, not restarted) and exits 0."""
    n = node(drain_timeout=20.0)
    marker = tmp_path / "drained"
    pids = _actor_pids(n, ("e/drainable", DRAINABLE, {"marker": str(marker), "drain_s": 0.3}),
                       ("e/plain", COUNTER, {}))
    os.killpg(n.worker.pid, signal.SIGTERM)
    code, took = n.wait_worker_exit(30)
    assert code == 0, procs.tail(n.worker_log)
    assert took < 15, took
    assert marker.read_text().split()[:2] == ["e/drainable", "1"]
    assert all(pid_gone(p) for p in pids)
    log = n.worker_log.read_text()
    assert "restart=in_place" not in log and "Traceback" not in log, log


def test_second_sigterm_stops_at_once(node, tmp_path):
    n = node(drain_timeout=120.0)
    marker = tmp_path / "drained"
    [pid] = _actor_pids(n, ("c/slow", DRAINABLE, {"marker": str(marker), "drain_s": 300}))
    n.kill_coordinator()  # so the worker drains its actor itself, at once
    n.worker.send_signal(signal.SIGTERM)
    wait_until(lambda: Path(str(marker) + ".started").exists(), 30, what="the drain hook to start")
    n.worker.send_signal(signal.SIGTERM)
    code, took = n.wait_worker_exit(15)
    assert code == 0, procs.tail(n.worker_log)
    assert took < 10, took
    assert not marker.exists()  # the hook was cut short
    wait_until(lambda: pid_gone(pid), 10, what="the actor process to end")
    assert "SIGTERM again while draining: stopping all actors now" in n.worker_log.read_text()


def test_drain_timeout_stops_what_is_left(node, tmp_path):
    n = node(drain_timeout=3.0)
    marker = tmp_path / "drained"
    [pid] = _actor_pids(n, ("d/slow", DRAINABLE, {"marker": str(marker), "drain_s": 300}))
    n.kill_coordinator()
    n.worker.send_signal(signal.SIGTERM)
    code, took = n.wait_worker_exit(20)
    assert code == 0, procs.tail(n.worker_log)
    assert 2.5 < took < 12, took
    assert Path(str(marker) + ".started").exists() and not marker.exists()
    wait_until(lambda: pid_gone(pid), 10, what="the actor process to end")
    assert "drain timeout (3s) passed with 1 actors left (d/slow)" in n.worker_log.read_text()


# ---------------------------------------------------------------- StopActor(drain=True)


async def _until(predicate, timeout: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not predicate():  # noqa: ASYNC110 (polls the agent's state)
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}") from None


async def test_stop_actor_with_drain_runs_the_hook_and_reports_stopped(tmp_path):
    """The worker side of StopActor(drain=True), on an agent whose coordinator is
    unreachable (commands are fed to it directly): drained actors run their hook and
    are reported STOPPED as drained; a plain stop does not run the hook."""
    agent = NodeAgent(WorkerOptions(coordinator="127.0.0.1:1", node_id="drain-unit", slots=4,
                                    spares=1, log_dir=str(tmp_path / "logs"), drain_timeout_s=20.0),
                      Security())
    stop = asyncio.Event()
    run = asyncio.create_task(agent.run(stop))
    markers = {name: tmp_path / name for name in ("drained", "plain")}
    try:
        for i, name in enumerate(markers):
            spec = pb.ActorSpec(name=f"u/{name}", class_path=DRAINABLE, max_restarts=-1,
                                kwargs=codec.encode({"marker": str(markers[name])}))
            agent.lifecycle.on_start(pb.StartActor(spec=spec, incarnation=1 + i, local_until=10))
        spec = pb.ActorSpec(name="u/counter", class_path=COUNTER)
        agent.lifecycle.on_start(pb.StartActor(spec=spec, incarnation=1, local_until=10))
        await _until(lambda: all(la.state == "alive" for la in agent.lifecycle.actors.values())
                     and len(agent.lifecycle.actors) == 3, 60, "three actors alive")
        agent.outbox.reports.clear()
        agent.lifecycle.on_stop(pb.StopActor(name="u/drained", incarnation=1, reason="node spot-0 drains",
                                    drain=True))
        agent.lifecycle.on_stop(pb.StopActor(name="u/plain", incarnation=2, reason="killed by the user"))
        agent.lifecycle.on_stop(pb.StopActor(name="u/counter", incarnation=1, reason="moving", drain=True))
        await _until(lambda: not agent.lifecycle.actors, 30, "the actors to stop")
        stopped = {r.name: r for r in agent.outbox.reports if r.kind == pb.REPORT_STOPPED}
        assert stopped["u/drained"].reason == "drained: node spot-0 drains"
        assert stopped["u/counter"].reason == "drained: moving"
        assert stopped["u/plain"].reason == "killed by the user"
        assert markers["drained"].read_text().split()[:2] == ["u/drained", "1"]
        assert not markers["plain"].exists() and not (tmp_path / "plain.started").exists()
        assert not any(r.kind == pb.REPORT_EXITED for r in agent.outbox.reports)
    finally:
        stop.set()
        await asyncio.wait_for(run, 30)


async def test_an_actor_that_ends_cleanly_while_its_node_drains_counts_as_drained(tmp_path):
    """A SIGTERM sent to the actor itself (with the rest of the node) drains it; the
    draining worker reports it STOPPED, neither a crash nor restarted."""
    agent = NodeAgent(WorkerOptions(coordinator="127.0.0.1:1", node_id="drain-self", slots=2,
                                    spares=0, log_dir=str(tmp_path / "logs")), Security())
    stop = asyncio.Event()
    run = asyncio.create_task(agent.run(stop))
    marker = tmp_path / "drained"
    try:
        spec = pb.ActorSpec(name="s/one", class_path=DRAINABLE, max_restarts=-1,
                            kwargs=codec.encode({"marker": str(marker)}))
        agent.lifecycle.on_start(pb.StartActor(spec=spec, incarnation=1, local_until=10))
        await _until(lambda: agent.lifecycle.actors.get("s/one") and agent.lifecycle.actors["s/one"].state == "alive",
                     60, "the actor alive")
        # as drain() would, without draining the actors itself
        agent.lifecycle.begin_drain("test", time.monotonic() + 60)
        os.kill(agent.lifecycle.actors["s/one"].pid, signal.SIGTERM)
        await _until(lambda: not agent.lifecycle.actors, 30, "the actor to end")
        [report] = [r for r in agent.outbox.reports if r.name == "s/one" and r.kind != pb.REPORT_STARTED]
        assert report.kind == pb.REPORT_STOPPED, report
        assert report.reason.startswith("drained: exited with code 0"), report.reason
        assert marker.read_text().split()[:2] == ["s/one", "1"]
    finally:
        stop.set()
        await asyncio.wait_for(run, 30)
