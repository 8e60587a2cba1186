"""The worker's fork server on a real cluster: a restarted actor runs in a spare forked
by the zygote and adopted by the worker, whose death (SIGKILL, SIGSEGV) is reported as
such; `FTRL_NO_ZYGOTE=1` gives cold spares as before; and an actor's orphaned children
do not stay zombies of the worker."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from tests.integration.conftest import event_seq, wait_event, wait_until

PROBE = "tests.fork_actors:Probe"


def _children_titles(pid: int) -> list[str]:
    return [" ".join(c.cmdline()) for c in psutil.Process(pid).children()]


def _died(client, seq: int, name: str, incarnation: int, why: str) -> dict:
    return wait_event(client, seq, lambda e: e["type"] == "DIED" and e["incarnation"] == incarnation
                      and why in e["message"], prefix=name, timeout=30)


def test_a_restarted_actor_runs_in_a_forked_spare_and_its_death_is_reported(make_cluster):
    cl = make_cluster(workers=1, slots=2)
    worker = cl.worker_procs["local-0"].pid
    c = cl.client()
    h = c.create_actor(PROBE, name="forked", max_restarts=-1)
    first = c.actor("forked")
    seq = event_seq(c)
    os.kill(first["pid"], signal.SIGKILL)
    _died(c, seq, "forked", first["incarnation"], "killed by signal SIGKILL")

    second = c.wait_actor("forked", 30, min_incarnation=first["incarnation"] + 1)
    origin = h.call("origin")
    assert origin["pid"] == second["pid"] and origin["ppid"] == worker
    assert Path(origin["argv0"]).name == "zygote.py", origin  # forked, not `-m ftrl.worker.host`
    assert any("ftrl-spare-zygote" in t for t in _children_titles(worker))
    os.kill(second["pid"], signal.SIGKILL)
    _died(c, seq, "forked", second["incarnation"], "killed by signal SIGKILL")

    third = c.wait_actor("forked", 30, min_incarnation=second["incarnation"] + 1)
    assert Path(h.call("origin")["argv0"]).name == "zygote.py"
    os.kill(third["pid"], signal.SIGSEGV)
    _died(c, seq, "forked", third["incarnation"], "killed by signal SIGSEGV")
    assert h.call("incr") == 1  # the next incarnation serves


def test_without_the_fork_server_spares_are_cold(make_cluster, monkeypatch):
    monkeypatch.setenv("FTRL_NO_ZYGOTE", "1")
    cl = make_cluster(workers=1, slots=2)
    worker = cl.worker_procs["local-0"].pid
    c = cl.client()
    h = c.create_actor(PROBE, name="cold", max_restarts=-1)
    first = c.actor("cold")
    seq = event_seq(c)
    os.kill(first["pid"], signal.SIGKILL)
    _died(c, seq, "cold", first["incarnation"], "killed by signal SIGKILL")
    c.wait_actor("cold", 30, min_incarnation=first["incarnation"] + 1)
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
