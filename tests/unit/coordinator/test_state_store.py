"""Durable coordinator state: the SQLite store, and a controller restarted on it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import pytest

from ftrl.coordinator.jobs import JobStage
from ftrl.coordinator.records import ActorState, NodeState
from ftrl.coordinator.store import SCHEMA_VERSION, Batch, SQLiteStore, StateStoreError, open_store
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    AlreadyExistsError,
    ConfigError,
    FailedPreconditionError,
    FtrlError,
    InvalidArgumentError,
    NotFoundError,
)
from tests.unit.coordinator.controller_harness import Harness

STARTED, EXITED = pb.REPORT_STARTED, pb.REPORT_EXITED


def running(h: Harness, name: str) -> pb.RunningActor:
    rec = h.c.actors[name]
    return pb.RunningActor(spec=rec.spec, incarnation=rec.incarnation, pid=rec.pid, address=rec.address,
                           restarts=rec.restarts, local_until=rec.local_until)


def restart(h: Harness, store_dir) -> Harness:
    """A new coordinator on the same state dir (the old one's store closed, as a kill does)."""
    h.c.store.close()
    # (monotonic clocks of two processes have nothing in common)
    return Harness(store=SQLiteStore(store_dir), start_time=h.now + 100)


def test_store_roundtrip_lock_and_schema(tmp_path):
    store = SQLiteStore(tmp_path)
    batch = Batch()
    batch.put("nodes", "n1", b"x")
    batch.meta["k"] = b"v"
    batch.results.append(("job", 1, b"r1"))
    batch.results.append(("job", 2, b"r2"))
    store.commit(batch)
    with pytest.raises(StateStoreError, match="in use by another coordinator") as e:
        SQLiteStore(tmp_path)
    assert e.value.kind == "locked"
    store.close()
    store = SQLiteStore(tmp_path)
    loaded = store.load()
    assert loaded.tables["nodes"] == {"n1": b"x"} and loaded.meta == {"k": b"v"}
    assert store.results("job", 1) == [(2, b"r2")]
    delete = Batch()
    delete.put("nodes", "n1", None)
    store.commit(delete)
    assert store.load().tables["nodes"] == {}
    store.close()
    db = sqlite3.connect(tmp_path / "coordinator.sqlite")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StateStoreError, match="newer than this ftrl") as e:
        SQLiteStore(tmp_path)
    assert e.value.kind == "newer"
    with pytest.raises(StateStoreError):  # --recover never discards a newer database
        open_store(tmp_path, recover=True)


def test_corrupt_database_refuses_and_recover_moves_it_aside(tmp_path):
    store = SQLiteStore(tmp_path)
    batch = Batch()
    for i in range(200):
        batch.put("actors", f"a{i}", b"y" * 500)
    store.commit(batch)
    store.close()
    path = tmp_path / "coordinator.sqlite"
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"coordinator.sqlite{suffix}").unlink(missing_ok=True)
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # garbage over a b-tree page
    path.write_bytes(bytes(data))
    with pytest.raises(StateStoreError, match="--recover") as e:
        SQLiteStore(tmp_path)
    assert e.value.kind == "corrupt"
    path.write_bytes(bytes(data[:1000]))  # truncated
    with pytest.raises(StateStoreError, match="--recover"):
        SQLiteStore(tmp_path)
    store = open_store(tmp_path, recover=True)
    assert store.load().tables["actors"] == {}
    assert (tmp_path / "coordinator.sqlite.corrupt-1").exists()
    store.close()


def test_restart_keeps_records_counts_and_reconciles(tmp_path):
    h = Harness(store=SQLiteStore(tmp_path), max_node_failures=5)
    h.register("n1", cpu=4)
    for name in ("a", "b", "gone"):
        h.create(name, max_restarts=3)
        h.started(name)
    h.now += 5
    inc = h.c.actors["a"].incarnation
    h.report("n1", "a", inc, EXITED, exit_code=1, reason="crash", restarting_locally=True,
             next_incarnation=inc + 1)
    h.report("n1", "a", inc + 1, STARTED, pid=7, address="127.0.0.1:7")
    h.create("waits", resources={"cpu": 100})  # never fits: PENDING
    assert h.c.actors["waits"].state == ActorState.PENDING
    epoch = h.c.nodes["n1"].epoch
    reported = [running(h, "a"), running(h, "b")]  # "gone" died while we were down
    unknown = pb.RunningActor(spec=pb.ActorSpec(name="stranger", class_path="tests.actors:Counter"),
                              incarnation=1, pid=9, address="127.0.0.1:9")

    h2 = restart(h, tmp_path)
    c = h2.c
    assert c.restored
    assert c.nodes["n1"].failures == 1 and c.actors["a"].restarts == 1
    assert c.actors["a"].incarnation == inc + 1 and c.actors["a"].state == ActorState.ALIVE
    assert c.actors["waits"].state == ActorState.PENDING
    h2.sessions["n1"] = h.sessions["n1"]
    reply = h2.register("n1", cpu=4, running=[*reported, unknown])
    assert reply.node_epoch > epoch  # epochs never go back across a restart
    assert [s.name for s in reply.stop] == ["stranger"]  # unknown: stopped, not adopted
    assert c.actors["a"].state == ActorState.ALIVE and c.actors["a"].incarnation == inc + 1
    # every node is back: the grace ends, the missing one restarts (in place)
    assert c.actors["gone"].state == ActorState.RESTARTING
    h2.advance(0.1)
    assert h2.starts("gone") and not h2.starts("a") and not h2.starts("b")


def test_unreturned_node_is_lost_after_the_grace(tmp_path):
    h = Harness(store=SQLiteStore(tmp_path))
    h.register("n1", cpu=2)
    h.register("n2", cpu=2)
    h.create("x")
    where = h.started("x")
    h2 = restart(h, tmp_path)
    other = "n2" if where[0] == "n1" else "n1"
    h2.sessions[other] = h.sessions[other]
    h2.register(other, cpu=2)
    h2.advance(1.0)
    assert not h2.starts("x")  # its node may still come back: nothing moves in the grace
    for _ in range(8):  # a node gets the grace (10 s here) to come back, more than a timeout
        h2.advance(1.0)
        h2.heartbeat(other)
    assert h2.c.nodes[where[0]].state == NodeState.ALIVE
    for _ in range(3):
        h2.advance(1.0)
        h2.heartbeat(other)
    assert h2.c.nodes[where[0]].state == NodeState.LOST
    assert h2.starts("x")[-1][0] == other


def job_request(job_id: str, tmp_path, **config) -> pb.SubmitJobRequest:
    data = {"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 1, **config}
    return pb.SubmitJobRequest(job_id=job_id, config=codec.encode(data), output_dir=str(tmp_path / job_id))


def test_jobs_survive_a_restart_and_follow_their_driver(tmp_path):
    h = Harness(store=SQLiteStore(tmp_path / "state"))
    h.register("n1", cpu=4)
    c = h.c
    job = c.submit_job(job_request("j1", tmp_path))
    assert job.stage == JobStage.STARTING  # the driver was placed at once
    driver = c.actors["j1/algorithm"]
    with pytest.raises(AlreadyExistsError):
        c.submit_job(job_request("j1", tmp_path))
    with pytest.raises(ConfigError, match="num_env_runners"):
        c.submit_job(job_request("bad", tmp_path, num_env_runner=2))
    with pytest.raises(InvalidArgumentError):
        c.submit_job(job_request("bad id", tmp_path))
    with pytest.raises(NotFoundError):
        c.stop_job("nope")
    h.started("j1/algorithm")
    row = codec.encode({"iteration": 1, "env_steps_sampled": 100})
    c.report_job(pb.JobReport(job_id="j1", incarnation=driver.incarnation, stage=pb.JOB_RUNNING,
                              iteration=1, env_steps_sampled=100, rows=[pb.JobResult(iteration=1, row=row)]))
    assert job.stage == JobStage.RUNNING and job.iteration == 1
    with pytest.raises(InvalidArgumentError):
        c.scale_job(pb.ScaleJobRequest(job_id="j1", num_env_runners=-5, num_learners=-1))
    c.scale_job(pb.ScaleJobRequest(job_id="j1", num_env_runners=3, num_learners=-1))
    with pytest.raises(FailedPreconditionError, match="cannot switch"):
        c.scale_job(pb.ScaleJobRequest(job_id="j1", num_env_runners=0, num_learners=-1))
    # a STARTING report (a driver that has not loaded its checkpoint) never zeroes the counters
    c.report_job(pb.JobReport(job_id="j1", incarnation=driver.incarnation, stage=pb.JOB_STARTING))
    assert job.iteration == 1 and job.env_steps_sampled == 100

    h2 = restart(h, tmp_path / "state")
    c2 = h2.c
    j = c2.jobs.get("j1")
    assert (j.stage, j.iteration, j.env_steps_sampled, j.num_env_runners) == (JobStage.RUNNING, 1, 100, 3)
    assert c2.store.results("j1") == [(1, row)]
    # a stale report (an older driver incarnation) is ignored; a report after the end too
    c2.report_job(pb.JobReport(job_id="j1", incarnation=driver.incarnation - 1, stage=pb.JOB_FAILED))
    assert j.stage == JobStage.RUNNING
    # the driver dies and restarts: RECOVERING, then RUNNING when it reports
    h2.sessions["n1"] = h.sessions["n1"]
    h2.register("n1", cpu=4, running=[running(h, "j1/algorithm")])
    for _ in range(10):
        h2.advance(1.0)
        h2.heartbeat("n1")
    inc = c2.actors["j1/algorithm"].incarnation
    h2.report("n1", "j1/algorithm", inc, EXITED, exit_code=1, reason="boom", restarting_locally=True,
              next_incarnation=inc + 1)
    assert j.stage == JobStage.RECOVERING and "boom" in j.reason
    c2.report_job(pb.JobReport(job_id="j1", incarnation=inc + 1, stage=pb.JOB_RUNNING, iteration=1))
    assert j.stage == JobStage.RUNNING
    c2.stop_job("j1")
    assert j.stop_requested
    c2.report_job(pb.JobReport(job_id="j1", incarnation=inc + 1, stage=pb.JOB_STOPPED, iteration=2,
                               reason="stopped on request"))
    assert j.stage == JobStage.STOPPED
    assert c2.actors["j1/algorithm"].state == ActorState.DEAD  # the ended job's actors are stopped
    c2.report_job(pb.JobReport(job_id="j1", incarnation=inc + 1, stage=pb.JOB_RUNNING, iteration=3))
    assert j.stage == JobStage.STOPPED and j.iteration == 2  # ignored on purpose


def test_job_fails_when_its_driver_runs_out_of_restarts(tmp_path):
    h = Harness()
    h.register("n1", cpu=2)
    job = h.c.submit_job(job_request("j", tmp_path))
    h.c.actors["j/algorithm"].spec.max_restarts = 0
    h.started("j/algorithm")
    h.now += 5
    inc = h.c.actors["j/algorithm"].incarnation
    h.report("n1", "j/algorithm", inc, EXITED, exit_code=1, reason="segfault")
    assert job.stage == JobStage.FAILED
    assert "segfault" in job.reason and "--resume" in job.reason


def test_pending_job_stays_queued_across_a_restart(tmp_path):
    h = Harness(store=SQLiteStore(tmp_path / "state"))
    job = h.c.submit_job(job_request("q", tmp_path))
    stopped = h.c.submit_job(job_request("s", tmp_path))
    assert job.stage == JobStage.PENDING  # no node yet
    h.c.stop_job("s")
    assert stopped.stage == JobStage.STOPPED
    h2 = restart(h, tmp_path / "state")
    assert h2.c.jobs.get("q").stage == JobStage.PENDING
    assert h2.c.jobs.get("s").stage == JobStage.STOPPED
    h2.register("n1", cpu=1)
    for _ in range(6):  # past the grace
        h2.advance(1.0)
        h2.heartbeat("n1")
    assert h2.c.jobs.get("q").stage == JobStage.STARTING
    assert h2.starts("q/algorithm") and not h2.starts("s/algorithm")


def test_worker_of_another_version_is_refused(tmp_path):
    from ftrl import __version__
    from ftrl.wire.errors import FailedPreconditionError

    h = Harness()
    req = pb.RegisterNodeRequest(node_id="old", session_id="s", address="127.0.0.1",
                                 resources={"cpu": 1}, version="0.0.1")
    with pytest.raises(FailedPreconditionError) as e:
        h.c.register_node(req)
    assert "0.0.1" in str(e.value) and __version__ in str(e.value)
    assert "old" not in h.c.nodes


def test_job_without_a_live_runner_fails_after_its_tolerance(tmp_path):
    h = Harness(job_unhealthy_timeout_s=30.0, heartbeat_timeout_s=1000.0)
    h.register("n1", cpu=4)
    job = h.c.submit_job(job_request("j", tmp_path))
    driver = h.started("j/algorithm")
    assert driver
    h.c.report_job(pb.JobReport(job_id="j", incarnation=1, stage=pb.JOB_RUNNING, iteration=1))
    h.create("j/env_runner/0", max_restarts=0)
    h.started("j/env_runner/0")
    h.now += 5
    inc = h.c.actors["j/env_runner/0"].incarnation
    h.report("n1", "j/env_runner/0", inc, EXITED, exit_code=1, reason="env exploded")
    assert h.c.actors["j/env_runner/0"].state == ActorState.DEAD
    h.advance(10)
    assert job.stage == JobStage.RUNNING  # within its tolerance
    h.advance(25)
    assert job.stage == JobStage.RUNNING
    h.advance(10)
    assert job.stage == JobStage.FAILED
    assert "no healthy env runner" in job.reason and "env exploded" in job.reason
    assert "--resume" in job.reason
    assert h.c.actors["j/algorithm"].state == ActorState.DEAD  # its actors were stopped


def test_a_new_state_dir_adopts_what_workers_run_and_rebuilds_their_jobs(tmp_path):
    """A coordinator with nothing to restore (a new or wiped state dir, --recover) takes
    what workers report as the truth: live actors are adopted, a running driver brings
    its job back."""
    old = Harness()
    old.register("n1", cpu=4)
    old.c.submit_job(job_request("j", tmp_path))
    old.started("j/algorithm")
    reported = [running(old, "j/algorithm")]
    h = Harness(store=SQLiteStore(tmp_path / "new-state"))
    h.sessions["n1"] = old.sessions["n1"]
    reply = h.register("n1", cpu=4, running=reported)
    assert not reply.stop
    assert h.c.actors["j/algorithm"].state == ActorState.ALIVE
    job = h.c.jobs.get("j")
    assert job.stage == JobStage.RUNNING and job.output_dir == str(tmp_path / "j")
    h.c.store.close()
    again = Harness(store=SQLiteStore(tmp_path / "new-state"))  # and it is durable from then on
    assert again.c.jobs.get("j").stage == JobStage.RUNNING


def test_in_use_tells_a_held_state_dir(tmp_path):
    from ftrl.coordinator.store import in_use

    assert not in_use(tmp_path)
    store = SQLiteStore(tmp_path)
    assert in_use(tmp_path)
    store.close()
    assert not in_use(tmp_path)


def _hold_state_dir(path, seconds: float) -> subprocess.Popen:
    """A real process holding a coordinator's lock on `path` for `seconds`."""
    code = ("import sys, time; from ftrl.coordinator.store import SQLiteStore; "
            "s = SQLiteStore(sys.argv[1]); print('held', flush=True); time.sleep(float(sys.argv[2]))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_fresh_local_cluster_waits_for_an_earlier_runs_coordinator_to_exit(tmp_path):
    """`ftrl train` right after the previous run was killed: that run's coordinator gets
    SIGTERM from Linux and needs a moment to stop; the new run waits for it."""
    from ftrl.client.cluster import LocalCluster
    from ftrl.coordinator.store import in_use

    holder = _hold_state_dir(tmp_path / "coordinator", 1.5)
    try:
        assert in_use(tmp_path / "coordinator")
        t0 = time.monotonic()
        LocalCluster(state_dir=tmp_path, fresh=True)
        assert 0.5 < time.monotonic() - t0 < 10
        assert not in_use(tmp_path / "coordinator")
    finally:
        holder.kill()
        holder.wait()


def test_a_fresh_local_cluster_refuses_a_state_dir_held_past_the_wait(tmp_path, monkeypatch):
    from ftrl.client import cluster

    monkeypatch.setattr(cluster, "FRESH_WAIT_S", 0.5)
    holder = _hold_state_dir(tmp_path / "coordinator", 30)
    try:
        with pytest.raises(FtrlError, match="in use by a running coordinator"):
            cluster.LocalCluster(state_dir=tmp_path, fresh=True)
        assert (tmp_path / "coordinator" / "coordinator.sqlite").exists()  # nothing removed
    finally:
        holder.kill()
        holder.wait()
