"""Lost workers, partitioned workers and a coordinator that dies: each test has its own cluster."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

import ftrl
from ftrl.coordinator.controller import LOCAL_RESTART_RANGE
from tests.cluster import (
    COUNTER,
    event_seq,
    pid_gone,
    running,
    wait_event,
    wait_until,
)


def _node(client, node_id: str) -> dict:
    return next(n for n in client.nodes() if n["node_id"] == node_id)


def test_lost_worker_actors_move_or_wait_for_room(make_cluster):
    cl = make_cluster(workers=0)
    cl.start_worker("n0", slots=3)
    cl.start_worker("n1", slots=1)
    cl.wait_nodes(["n0", "n1"])
    c = cl.client()
    small = c.create_actor(COUNTER, name="small", kwargs={"start": 10})
    big = c.create_actor(COUNTER, name="big", resources={"cpu": 2})
    before = {name: c.actor(name) for name in ("small", "big")}
    assert {a["node_id"] for a in before.values()} == {"n0"}
    seq = event_seq(c)

    cl.worker_procs["n0"].send_signal(signal.SIGKILL)
    lost = wait_event(c, seq, lambda e: e["type"] == "NODE_LOST" and e["node_id"] == "n0",
                      nodes=True, timeout=30)
    assert "the worker process is gone" in lost["message"]  # its port refuses: no heartbeat wait
    assert _node(c, "n0")["state"] == "LOST"
    # the actors died with their worker
    for rec in before.values():
        wait_until(lambda rec=rec: pid_gone(rec["pid"]), 10, what=f"{rec['name']} to die with its worker")

    # the one that fits moves to n1, past n0's local incarnation range
    moved = c.wait_actor("small", 30, min_incarnation=2)
    assert moved["state"] == "ALIVE" and moved["node_id"] == "n1"
    assert moved["incarnation"] >= before["small"]["incarnation"] + LOCAL_RESTART_RANGE
    assert small.call("incr") == 11
    died = wait_event(c, seq, lambda e: e["type"] == "DIED" and e["actor"] == "small")
    assert "node n0 lost" in died["message"]

    # the one that does not fit waits as RESTARTING until a node with room joins
    waiting = c.actor("big")
    assert waiting["state"] == "RESTARTING" and waiting["node_id"] == ""
    cl.start_worker("n2", slots=2)
    placed = c.wait_actor("big", 60, min_incarnation=2)
    assert placed["state"] == "ALIVE" and placed["node_id"] == "n2"
    assert big.call("incr") == 1
    joined = wait_event(c, seq, lambda e: e["type"] == "NODE_JOINED" and e["node_id"] == "n2", nodes=True)
    assert joined["seq"] > lost["seq"]
    assert running(cl.coordinator_proc) and running(cl.worker_procs["n1"])


def test_a_killed_worker_is_lost_at_once_not_after_the_heartbeat_timeout(make_cluster):
    """Its stream ends and its port refuses connections: the coordinator knows the worker
    (and the actors that die with it) is gone without waiting 60 s of heartbeats."""
    cl = make_cluster(workers=2, slots=2, heartbeat_interval=1.0, heartbeat_timeout=60.0)
    c = cl.client()
    h = c.create_actor(COUNTER, name="quick", kwargs={"start": 5}, max_restarts=-1)
    first = c.actor("quick")
    home = first["node_id"]
    seq = event_seq(c)
    t0 = time.monotonic()
    cl.worker_procs[home].send_signal(signal.SIGKILL)
    lost = wait_event(c, seq, lambda e: e["type"] == "NODE_LOST" and e["node_id"] == home,
                      nodes=True, timeout=45)
    assert time.monotonic() - t0 < 30, "lost by the heartbeat timeout, not at once"
    assert "the worker process is gone" in lost["message"]
    moved = c.wait_actor("quick", 30, min_incarnation=first["incarnation"] + 1)
    assert moved["state"] == "ALIVE" and moved["node_id"] != home
    assert h.call("incr") == 6


def test_partitioned_worker_is_fenced_when_it_returns(make_cluster):
    cl = make_cluster(workers=2, slots=2)
    c = cl.client()
    h = c.create_actor(COUNTER, name="p", kwargs={"start": 1})
    first = c.actor("p")
    home = first["node_id"]
    other = "local-1" if home == "local-0" else "local-0"
    worker = cl.worker_procs[home]
    seq = event_seq(c)
    worker.send_signal(signal.SIGSTOP)  # the worker is silent, its actor process still runs
    try:
        wait_event(c, seq, lambda e: e["type"] == "NODE_LOST" and e["node_id"] == home,
                   nodes=True, timeout=30)
        moved = c.wait_actor("p", 30, min_incarnation=first["incarnation"] + 1)
        assert moved["node_id"] == other and moved["incarnation"] >= 1 + LOCAL_RESTART_RANGE
        assert not pid_gone(first["pid"])  # the old copy is still there while its node is cut off
    finally:
        worker.send_signal(signal.SIGCONT)
    # the worker comes back, registers again and is told to stop the fenced copy
    wait_until(lambda: _node(c, home)["state"] == "ALIVE" and _node(c, home)["connected"], 30,
               what=f"{home} to reconnect")
    wait_until(lambda: pid_gone(first["pid"]), 30, what="the fenced copy to be stopped")
    rec = c.actor("p")
    assert (rec["node_id"], rec["incarnation"], rec["state"]) == (other, moved["incarnation"], "ALIVE")
    assert h.call("incr") == 2  # the handle follows the actor to its new node
    assert "p" not in _node(c, home)["actors"]
    assert running(worker)


def test_coordinator_restart_keeps_workers_and_actors(make_cluster):
    cl = make_cluster(workers=1, slots=2)
    c = cl.client()
    h = c.create_actor(COUNTER, name="survivor", kwargs={"start": 1}, max_restarts=-1)
    assert h.call("incr") == 2
    before = c.actor("survivor")
    worker = cl.worker_procs["local-0"]
    worker_pid = worker.pid
    port = cl.port

    cl.coordinator_proc.send_signal(signal.SIGKILL)
    cl.coordinator_proc.wait(10)
    # the data plane does not need the coordinator
    assert h.call("incr") == 3
    assert h.call("incr") == 4
    with pytest.raises(ftrl.ActorUnavailableError):
        c.actors()
    assert running(worker) and psutil.pid_exists(before["pid"])

    cl.start_coordinator()
    assert cl.port == port
    cl.wait_nodes(["local-0"], timeout=60)
    rec = wait_until(lambda: next((a for a in c.actors() if a["name"] == "survivor"), None), 10,
                     what="the survivor to be reported by its worker")
    assert rec["state"] == "ALIVE"
    assert (rec["pid"], rec["incarnation"], rec["node_id"]) == (before["pid"], before["incarnation"], "local-0")
    assert rec["max_restarts"] == -1
    node = _node(c, "local-0")
    assert node["pid"] == worker_pid and node["actors"] == ["survivor"]
    assert node["available"]["cpu"] == 1.0
    assert h.call("incr") == 5  # same process, same state

    # the reconnected worker is fully back: local restarts are reported and new actors start
    seq = event_seq(c)
    os.kill(rec["pid"], signal.SIGKILL)
    again = c.wait_actor("survivor", 30, min_incarnation=rec["incarnation"] + 1)
    assert again["node_id"] == "local-0" and again["pid"] != rec["pid"]
    wait_event(c, seq, lambda e: e["type"] == "RESTARTED", prefix="survivor")
    assert h.call("incr") == 2
    fresh = c.create_actor(COUNTER, name="newcomer")
    assert fresh.call("incr") == 1
    assert running(worker) and worker.pid == worker_pid


@pytest.mark.parametrize("strict", [True, False])
def test_result_of_a_call_that_outlived_its_fenced_callee_is_discarded(make_cluster, strict):
    """A call in flight to a copy on a node that is declared lost meanwhile: the copy
    finishes and answers, but its result must not be accepted after the fence."""
    cluster = make_cluster(workers=1, slots=2)
    c = cluster.client()
    c.create_actor(COUNTER, name="slow", max_restarts=-1)
    old = c.actor("slow")
    cluster.wait_nodes([cluster.start_worker("local-1")])
    handle = c.get_actor("slow", strict=strict)
    assert handle.call("pid") == old["pid"]
    future = handle.submit("sleep", 6.0)
    worker = cluster.worker_procs[old["node_id"]]
    worker.send_signal(signal.SIGSTOP)  # its heartbeats stop; the actor process runs on
    try:
        moved = c.wait_actor("slow", 30, min_incarnation=old["incarnation"] + 1)
        assert moved["node_id"] == "local-1" and moved["state"] == "ALIVE"
        with pytest.raises(ftrl.StaleIncarnationError, match=r"discarded the result of slow\.sleep") as info:
            future.result(timeout=30)
        assert info.value.discarded
        assert not pid_gone(old["pid"])  # the old copy did run the call to its end
    finally:
        worker.send_signal(signal.SIGCONT)
    # healed: the old node is told to stop its fenced copy; calls go to the new one
    wait_until(lambda: pid_gone(old["pid"]), 30, what="the fenced copy to stop")
    if not strict:
        assert handle.call("pid") == moved["pid"]
    else:
        assert handle.wait_alive(10) == moved["incarnation"]
        assert handle.call("pid") == moved["pid"]


def test_a_node_over_its_failure_limit_is_excluded_and_its_actors_move(make_cluster):
    """Per-node failure counts for real: SIGKILL an actor until its node passes
    max_node_failures; the node is EXCLUDED and the actor moves to the other worker."""
    cluster = make_cluster(workers=1, slots=2, max_node_failures=2)
    c = cluster.client()
    c.create_actor(COUNTER, name="flaky", max_restarts=-1)
    first = c.actor("flaky")
    cluster.wait_nodes([cluster.start_worker("local-1")])
    seq = event_seq(c)
    for _ in range(3):  # failures 1, 2 restart in place; the 3rd is over the limit of 2
        before = c.actor("flaky")
        assert before["node_id"] == first["node_id"]
        os.kill(before["pid"], signal.SIGKILL)
        c.wait_actor("flaky", 30, min_incarnation=before["incarnation"] + 1)
    excluded = wait_event(c, seq, lambda e: e["type"] == "NODE_EXCLUDED", nodes=True, timeout=30)
    assert excluded["node_id"] == first["node_id"] and "max_node_failures=2" in excluded["message"]
    moved = c.wait_actor("flaky", 30, min_incarnation=first["incarnation"] + LOCAL_RESTART_RANGE)
    assert moved["state"] == "ALIVE" and moved["node_id"] == "local-1"
    node = _node(c, first["node_id"])
    assert node["state"] == "EXCLUDED" and node["actors"] == [] and node["failures"] == 3
    # an excluded node gets no new actors
    c.create_actor(COUNTER, name="newcomer", resources={"cpu": 0.5})
    assert c.actor("newcomer")["node_id"] == "local-1"
