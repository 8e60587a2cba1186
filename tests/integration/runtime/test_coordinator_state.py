"""A coordinator with durable state: kill -9 it, start it again on the same state dir."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys

from ftrl import __version__
from tests.cluster import COUNTER, REPO, cluster_env, running, wait_until


def _node(client, node_id: str) -> dict:
    return next(n for n in client.nodes() if n["node_id"] == node_id)


def _kill_coordinator(cl) -> None:
    cl.coordinator_proc.send_signal(signal.SIGKILL)
    cl.coordinator_proc.wait(10)


def test_restart_keeps_counts_pending_actors_and_runs_nothing_twice(make_cluster):
    cl = make_cluster(workers=1, slots=2)
    c = cl.client()
    h = c.create_actor(COUNTER, name="kept", kwargs={"start": 1}, max_restarts=5)
    before = c.actor("kept")
    os.kill(before["pid"], signal.SIGKILL)  # one restart in place, one node failure
    restarted = c.wait_actor("kept", 30, min_incarnation=before["incarnation"] + 1)
    assert restarted["restarts"] == 1 and _node(c, "local-0")["failures"] == 1
    c.create_actor(COUNTER, name="waits", resources={"gpu": 1}, wait=False)  # no GPU here: PENDING
    assert c.actor("waits")["state"] == "PENDING"
    assert h.call("incr") == 2

    _kill_coordinator(cl)
    assert h.call("incr") == 3  # the data plane goes on without it
    cl.start_coordinator()
    cl.wait_nodes(["local-0"], timeout=60)
    rec = wait_until(lambda: (a := c.actor("kept"))["state"] == "ALIVE" and a, 30, what="kept ALIVE")
    # the same process (not started twice), its restart count and its node's failures kept
    assert (rec["pid"], rec["incarnation"], rec["restarts"]) == (
        restarted["pid"], restarted["incarnation"], 1)
    assert _node(c, "local-0")["failures"] == 1
    assert c.actor("waits")["state"] == "PENDING"
    assert h.call("incr") == 4

    # a second coordinator on the same state dir refuses (a lock), saying why
    second = subprocess.run(
        [sys.executable, "-m", "ftrl", "coordinator", "--port", "0",
         "--state-dir", str(cl.coordinator_state_dir)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **cluster_env()}, cwd=REPO)
    assert second.returncode != 0
    assert "in use by another coordinator" in second.stderr
    assert running(cl.coordinator_proc)


def test_corrupt_database_refuses_then_recover_rebuilds(make_cluster):
    cl = make_cluster(workers=1, slots=2)
    c = cl.client()
    h = c.create_actor(COUNTER, name="survivor", kwargs={"start": 10})
    pid = c.actor("survivor")["pid"]
    _kill_coordinator(cl)
    db = cl.coordinator_state_dir / "coordinator.sqlite"
    with sqlite3.connect(db) as conn:  # fold the WAL in, then tear the file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.write_bytes(db.read_bytes()[:1500])
    bad = subprocess.run(
        [sys.executable, "-m", "ftrl", "coordinator", "--port", "0",
         "--state-dir", str(cl.coordinator_state_dir)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **cluster_env()}, cwd=REPO)
    assert bad.returncode != 0
    assert "unreadable" in bad.stderr and "--recover" in bad.stderr
    cl.start_coordinator(extra=["--recover"])
    cl.wait_nodes(["local-0"], timeout=60)
    rec = wait_until(lambda: (a := c.actor("survivor"))["state"] == "ALIVE" and a, 30,
                     what="the survivor adopted from its worker's report")
    assert rec["pid"] == pid
    assert h.call("incr") == 11
    assert list(cl.coordinator_state_dir.glob("coordinator.sqlite.corrupt-*"))


def test_worker_of_another_version_is_refused_and_exits(make_cluster):
    cl = make_cluster(workers=0)
    code = ("import sys, ftrl._version; ftrl._version.__version__ = '0.0.9'; from ftrl.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    worker = subprocess.run(
        [sys.executable, "-c", code, "worker", "--coordinator", cl.address, "--node-id", "old",
         "--token-file", str(cl.token_file)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **cluster_env()}, cwd=REPO)
    assert worker.returncode != 0  # refused at once, not retried forever
    assert "0.0.9" in worker.stderr and __version__ in worker.stderr
    assert "old" not in {n["node_id"] for n in cl.client().nodes()}
