"""A paused coordinator, and a paused machine (every process SIGSTOPped at once, as a
paused or migrating VM does): the silence nobody could have heard is not a failure.

Without `ftrl.util.awake_clock`, the coordinator counted its own pause as every node's
silence and declared them all lost the moment it ran again (every actor restarted), and
the worker counted its own pause as its actors' silence (a hung-actor kill when an
actor answered its first ping late) and as the coordinator link's (a reconnect)."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from tests.cluster import COUNTER, event_seq, running, wait_until


def _node(client, node_id: str) -> dict:
    return next(n for n in client.nodes() if n["node_id"] == node_id)


def _events(client, after_seq: int) -> list[dict]:
    return list(client.events(nodes=True, after_seq=after_seq, timeout=1.0))


def test_a_paused_coordinator_does_not_lose_its_nodes(make_cluster):
    cl = make_cluster(workers=1)  # heartbeat timeout 2 s
    c = cl.client()
    h = c.create_actor(COUNTER, name="steady", kwargs={"start": 1})
    before = c.actor("steady")
    seq = event_seq(c)

    cl.coordinator_proc.send_signal(signal.SIGSTOP)
    time.sleep(3 * cl.heartbeat_timeout)
    cl.coordinator_proc.send_signal(signal.SIGCONT)

    # the worker's link timed out meanwhile (its acks stopped): it comes back
    wait_until(lambda: _node(c, "local-0")["connected"], 30, what="the worker to reconnect")
    time.sleep(2 * cl.heartbeat_timeout)  # a loss would have been declared by now
    lost = [e for e in _events(c, seq) if e["type"] == "NODE_LOST"]
    assert not lost, f"the coordinator's own pause was taken for a lost node: {lost}"
    after = c.actor("steady")
    assert (after["state"], after["incarnation"], after["pid"]) == ("ALIVE", before["incarnation"], before["pid"])
    assert h.call("incr") == 2
    coordinator_log = (cl.state_dir / "coordinator.log").read_text()
    assert "the coordinator did not run for" in coordinator_log


def test_a_paused_machine_loses_nothing(make_cluster):
    """Coordinator, worker and actor stopped together for longer than the heartbeat and
    hang timeouts; the actor is continued a moment after the others (the first ping
    after the pause then goes unanswered, as when a resumed process is scheduled late)."""
    cl = make_cluster(workers=1, heartbeat_timeout=2.0, actor_hang_timeout=4.0)
    c = cl.client()
    h = c.create_actor(COUNTER, name="steady", kwargs={"start": 1})
    before = c.actor("steady")
    seq = event_seq(c)
    actor = psutil.Process(before["pid"])
    others = [psutil.Process(cl.coordinator_proc.pid), psutil.Process(cl.worker_procs["local-0"].pid)]

    for p in (*others, actor):
        p.send_signal(signal.SIGSTOP)
    time.sleep(2 * cl.actor_hang_timeout)
    for p in others:
        p.send_signal(signal.SIGCONT)
    time.sleep(1.5)
    try:
        actor.send_signal(signal.SIGCONT)
    except psutil.NoSuchProcess:
        pytest.fail("the actor was killed while it was still stopped: the worker took its own pause for the actor's silence")

    time.sleep(cl.actor_hang_timeout)  # a hung-actor kill or a node loss would be done by now
    after = c.actor("steady")
    assert (after["state"], after["incarnation"], after["pid"]) == ("ALIVE", before["incarnation"], before["pid"])
    assert h.call("incr") == 2
    bad = [e for e in _events(c, seq) if e["type"] in ("NODE_LOST", "DIED", "RESTARTED", "DEAD")]
    assert not bad, f"a pause of the whole machine was taken for failures: {bad}"
    worker_log = (cl.state_dir / "worker-local-0.log").read_text()
    assert "ACTOR_HUNG" not in worker_log
    assert "coordinator link down" not in worker_log
    assert "the worker did not run for" in worker_log
    assert running(cl.coordinator_proc) and running(cl.worker_procs["local-0"])
