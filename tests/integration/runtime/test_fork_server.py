"""The worker's fork server on a real cluster: a restarted actor runs in a spare forked
by the zygote and adopted by the worker, whose death (SIGKILL, SIGSEGV) is reported as
such; `FTRL_NO_ZYGOTE=1` gives cold spares as before; and an actor's orphaned children
do not stay zombies of the worker."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from tests.cluster import event_seq, wait_event, wait_until

PROBE = "tests.fork_actors:Probe"


def _children_titles(pid: int) -> list[str]:
    return [" ".join(c.cmdline()) for c in psutil.Process(pid).children()]


def _died(client, seq: int, name: str, incarnation: int, why: str) -> dict:
    return wait_event(client, seq, lambda e: e["type"] == "DIED" and e["incarnation"] == incarnation
                      and why in e["message"], prefix=name, timeout=30)


def _kill_and_restarted(client, name: str, sig: int = signal.SIGKILL) -> dict:
    """Kill the actor's process with `sig`: its death is reported with that signal, and
    its next incarnation comes up; that one's record."""
    before = client.actor(name)
    seq = event_seq(client)
    os.kill(before["pid"], sig)
    _died(client, seq, name, before["incarnation"], f"killed by signal {signal.Signals(sig).name}")
    return client.wait_actor(name, 30, min_incarnation=before["incarnation"] + 1)


def test_a_restarted_actor_runs_in_a_forked_spare_and_its_death_is_reported(make_cluster):
    cl = make_cluster(workers=1, slots=2)
    worker = cl.worker_procs["local-0"].pid
    c = cl.client()
    h = c.create_actor(PROBE, name="forked", max_restarts=-1)
    second = _kill_and_restarted(c, "forked")
    origin = h.call("origin")
    assert origin["pid"] == second["pid"] and origin["ppid"] == worker
    assert Path(origin["argv0"]).name == "zygote.py", origin  # forked, not `-m ftrl.worker.host`
    assert any("ftrl-spare-zygote" in t for t in _children_titles(worker))

    third = _kill_and_restarted(c, "forked")  # forked spares report their real exit status
    assert Path(h.call("origin")["argv0"]).name == "zygote.py"
    _kill_and_restarted(c, "forked", signal.SIGSEGV)
    assert h.call("incr") == 1  # the next incarnation serves
    assert c.actor("forked")["incarnation"] > third["incarnation"]


def test_without_the_fork_server_spares_are_cold(make_cluster, monkeypatch):
    monkeypatch.setenv("FTRL_NO_ZYGOTE", "1")
    cl = make_cluster(workers=1, slots=2)
    worker = cl.worker_procs["local-0"].pid
    c = cl.client()
    h = c.create_actor(PROBE, name="cold", max_restarts=-1)
    _kill_and_restarted(c, "cold")
    origin = h.call("origin")
    assert origin["ppid"] == worker and Path(origin["argv0"]).name == "host.py", origin
    assert not any("zygote" in t for t in _children_titles(worker))


def test_an_actors_orphaned_child_is_reaped_by_the_worker(make_cluster):
    cl = make_cluster(workers=1, slots=2)
    worker = cl.worker_procs["local-0"].pid
    c = cl.client()
    h = c.create_actor(PROBE, name="parent", max_restarts=-1)
    sleeper = h.call("spawn_sleeper", 3.0)
    os.kill(c.actor("parent")["pid"], signal.SIGKILL)
    # orphaned: the worker, a subreaper, adopts it ...
    wait_until(lambda: psutil.Process(sleeper).ppid() == worker, 10, what="the worker to adopt the orphan")
    # ... and reaps it once it exits: no zombie is left
    wait_until(lambda: not psutil.pid_exists(sleeper), 20, what="the orphan to be reaped")
