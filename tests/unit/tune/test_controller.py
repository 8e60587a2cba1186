"""ftrl.tune.controller: the tuner's loop composing its parts, on a fake cluster (a client in
memory: nodes, actors, jobs, drivers that answer checkpoint_now and exploit). Placement and
the queue, a stop criterion, a failed job retried, a lost node pre-empting only the trial
waiting on it, an exploit in place, a restarted tuner making a saved decision again, and
stop() pausing the trials; experiment.json keeps the statuses' strings throughout."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ftrl.tune import controller as controller_module
from ftrl.tune.controller import TuneController
from ftrl.tune.experiment import FORMAT, LINEAGE_FILE, Trial, read_state, write_state
from ftrl.wire.errors import AlreadyExistsError

FINAL = ("FINISHED", "STOPPED", "FAILED")


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


class FakeCluster:
    """The client calls the tuner makes, on an in-memory cluster. A submitted job runs at once,
    its driver on the first ALIVE node; stop() ends a job at once."""

    def __init__(self, cpus: float = 4.0):
        self.lock = threading.Lock()
        self._nodes = {"n1": {"node_id": "n1", "state": "ALIVE", "resources": {"cpu": cpus, "gpu": 0.0}}}
        self._jobs: dict[str, dict[str, Any]] = {}
        self._actors: dict[str, dict[str, Any]] = {}
        self.submitted: list[tuple[str, dict[str, Any]]] = []
        self.stopped: list[tuple[str, str]] = []
        self.killed: list[str] = []
        self.calls: list[tuple[str, str, tuple]] = []
        self.methods: dict[str, Callable[..., Any]] = {}  # "checkpoint_now", "exploit": (trial, *args) -> reply

    # what the tuner calls
    def nodes(self) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(list(self._nodes.values()))

    def actors(self) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(list(self._actors.values()))

    def jobs(self) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(list(self._jobs.values()))

    def submit(self, job: dict[str, Any], job_id: str, output_dir: str, resume: bool) -> dict[str, Any]:
        with self.lock:
            if job_id in self._jobs and self._jobs[job_id]["stage"] not in FINAL:
                raise AlreadyExistsError(f"job {job_id} exists")
            node = next(n for n, info in self._nodes.items() if info["state"] == "ALIVE")
            self._jobs[job_id] = {"job_id": job_id, "stage": "RUNNING", "metrics": {}, "reason": "",
                                  "stop_requested": False}
            name = f"{job_id}/algorithm"
            self._actors[name] = {"name": name, "state": "ALIVE", "node_id": node, "resources": {"cpu": 0.0}}
            self.submitted.append((job_id, job))
            return copy.deepcopy(self._jobs[job_id])

    def stop(self, job_id: str, reason: str = "", wait: bool = False, timeout: float | None = None) -> dict[str, Any]:
        with self.lock:
            job = self._jobs[job_id]
            if job["stage"] not in FINAL:
                job["stage"], job["reason"] = "STOPPED", reason
            self._actors.pop(f"{job_id}/algorithm", None)
            self.stopped.append((job_id, reason))
            return copy.deepcopy(job)

    def kill_actor(self, name: str, reason: str = "") -> None:
        with self.lock:
            self._actors.pop(name, None)
            self.killed.append(name)

    def get_actor(self, name: str) -> Any:
        cluster = self

        class Handle:
            def options(self, timeout: float) -> Handle:
                return self

            def submit(self, method: str, *args: Any) -> Future:
                trial = name.removesuffix("/algorithm")
                with cluster.lock:
                    cluster.calls.append((trial, method, args))
                future: Future = Future()
                try:
                    future.set_result(cluster.methods[method](trial, *args))
                except Exception as e:
                    future.set_exception(e)
                return future

        return Handle()

    # what the test does
    def report(self, job_id: str, **row: Any) -> None:
        with self.lock:
            self._jobs[job_id]["metrics"] = row

    def set_job(self, job_id: str, **fields: Any) -> None:
        with self.lock:
            self._jobs[job_id].update(fields)

    def set_node(self, node_id: str, state: str, cpus: float = 4.0) -> None:
        with self.lock:
            self._nodes[node_id] = {"node_id": node_id, "state": state, "resources": {"cpu": cpus, "gpu": 0.0}}

    def set_actor(self, name: str, **fields: Any) -> None:
        with self.lock:
            self._actors[name].update(fields)

    def stage(self, job_id: str) -> str:
        with self.lock:
            return self._jobs[job_id]["stage"]


def experiment(tmp_path: Path, n: int, *, cpu: float = 2.0, scheduler: dict | None = None,
               stop: dict | None = None, **extra: Any) -> Path:
    """An experiment directory as `Tuner.fit` makes it (the parts the tuner reads)."""
    trials = {f"exp-{i}": Trial(f"exp-{i}", i, {"lr": 1e-3 * (i + 1)}, {"lr": 1e-3 * (i + 1)},
                                str(tmp_path / f"exp-{i}"), resources={"cpu": cpu, "gpu": 0.0}).to_dict()
              for i in range(n)}
    state = {"format": FORMAT, "name": "exp", "status": "PENDING", "metric": "score", "mode": "max",
             "time_attr": "iteration", "scheduler": scheduler or {"kind": "fifo"}, "param_keys": ["lr"],
             "trials": trials, "counters": {}, "started_at": time.time(), "experiment_dir": str(tmp_path),
             "spec": {"base_job": {"algo": "PPO", "env": "CartPole-v1"}, "stop": stop or {"iteration": 3},
                      "max_failures": 1, "max_concurrent_trials": None, "live_keys": ["lr"]}, **extra}
    write_state(tmp_path, state)
    return tmp_path


@pytest.fixture
def no_exit(monkeypatch):
    """A tuner that hits a bug exits its process (to be restarted in place): not pytest's."""
    exits: list[int] = []
    monkeypatch.setattr(controller_module, "os", SimpleNamespace(_exit=exits.append))
    yield exits
    assert exits == [], "the tuner failed (see its log)"


def trial_status(expdir: Path, tid: str) -> str:
    return read_state(expdir)["trials"][tid]["status"]


def end(tuner: TuneController) -> None:
    tuner.stop()
    assert tuner.store.wait_closed(30.0)


def test_trials_are_placed_followed_retried_and_preempted(tmp_path, no_exit):
    cluster = FakeCluster(cpus=4.0)
    expdir = experiment(tmp_path, 3, cpu=2.0)
    tuner = TuneController(str(expdir), client=cluster)
    try:
        # room for two of three (2 CPUs each on 4): the third waits in the queue
        wait_until(lambda: len(cluster.submitted) == 2, what="two trials submitted")
        assert [j for j, _ in cluster.submitted] == ["exp-0", "exp-1"]
        job = cluster.submitted[0][1]
        assert job["lr"] == 1e-3 and job["stop"] == {"stop_iters": 3}
        wait_until(lambda: trial_status(expdir, "exp-1") == "RUNNING", what="exp-1 RUNNING on disk")
        assert trial_status(expdir, "exp-2") == "PENDING"
        # a stop criterion: the tuner stops the job, the trial is TERMINATED, the next one starts
        cluster.report("exp-0", iteration=3, score=10.0)
        wait_until(lambda: trial_status(expdir, "exp-0") == "TERMINATED", what="exp-0 TERMINATED")
        assert cluster.stopped[0] == ("exp-0", "tune stop: iteration 3 >= 3")
        wait_until(lambda: [j for j, _ in cluster.submitted][-1] == "exp-2", what="exp-2 submitted")
        saved = read_state(expdir)["trials"]["exp-0"]
        assert saved["best_metric"] == 10.0 and saved["last_result"] == {"iteration": 3, "score": 10.0}
        # a failed job is retried from its checkpoint (max_failures 1)
        cluster.set_job("exp-1", stage="FAILED", reason="boom")
        wait_until(lambda: [j for j, _ in cluster.submitted].count("exp-1") == 2, what="exp-1 retried")
        # (on disk the first run's RUNNING may still show until the retry is saved: wait for both)
        wait_until(lambda: (t := read_state(expdir)["trials"]["exp-1"])["status"] == "RUNNING"
                   and t["num_failures"] == 1, what="exp-1 back, its failure counted")
        # the node is lost: only the trial whose actor waits for it is pre-empted, and waits
        # at the front of the queue for room
        cluster.set_node("n1", "LOST")
        cluster.set_actor("exp-2/algorithm", state="RESTARTING")
        wait_until(lambda: trial_status(expdir, "exp-2") == "PENDING", what="exp-2 pre-empted")
        assert ("exp-2", "pre-empted: its node was lost") in cluster.stopped
        assert "exp-2/algorithm" in cluster.killed
        assert trial_status(expdir, "exp-1") == "RUNNING"
        time.sleep(0.6)  # a few passes: no room anywhere, nothing starts
        assert [j for j, _ in cluster.submitted].count("exp-2") == 1
        cluster.set_node("n2", "ALIVE", cpus=4.0)
        wait_until(lambda: [j for j, _ in cluster.submitted].count("exp-2") == 2, what="exp-2 resumed")
        wait_until(lambda: trial_status(expdir, "exp-2") == "RUNNING", what="exp-2 RUNNING again")
        state = read_state(expdir)
        assert state["counters"]["num_preemptions"] == 1 and state["counters"]["num_trial_failures"] == 1
        assert state["trials"]["exp-2"]["num_preemptions"] == 1 and state["trials"]["exp-2"]["num_failures"] == 0
    finally:
        end(tuner)
    # stop(): the running trials stop with a checkpoint and are PAUSED; the experiment STOPPED
    assert tuner.status()["status"] == "STOPPED"
    state = read_state(expdir)
    assert state["status"] == "STOPPED"
    assert {tid: t["status"] for tid, t in state["trials"].items()} == {
        "exp-0": "TERMINATED", "exp-1": "PAUSED", "exp-2": "PAUSED"}
    text = (expdir / "experiment.json").read_text()
    assert '"status": "PAUSED"' in text and "TrialStatus" not in text


def test_the_experiment_finishes_when_every_trial_ended(tmp_path, no_exit):
    cluster = FakeCluster(cpus=8.0)
    expdir = experiment(tmp_path, 2, cpu=2.0)
    tuner = TuneController(str(expdir), client=cluster)
    wait_until(lambda: len(cluster.submitted) == 2, what="both trials submitted")
    cluster.set_job("exp-0", stage="FINISHED")
    cluster.report("exp-1", iteration=1, score=1.0)
    cluster.set_job("exp-1", stage="FAILED", reason="boom")
    wait_until(lambda: [j for j, _ in cluster.submitted].count("exp-1") == 2, what="exp-1 retried")
    cluster.set_job("exp-1", stage="FAILED", reason="boom again")  # past max_failures: ERROR
    assert tuner.store.wait_closed(30.0)
    state = read_state(expdir)
    assert state["status"] == "FINISHED"
    assert state["trials"]["exp-0"]["status"] == "TERMINATED"
    assert state["trials"]["exp-1"]["status"] == "ERROR" and state["trials"]["exp-1"]["error"] == "boom again"
    status = tuner.status()
    assert status["done"] and status["status"] == "FINISHED" and status["counters"]["num_trial_failures"] == 2


PBT = {"kind": "pbt", "time_attr": "iteration", "perturbation_interval": 2, "quantile_fraction": 0.5,
       "resample_probability": 0.0, "hyperparam_mutations": {"lr": [1e-3, 2e-3, 3e-3]}, "metric": "score",
       "mode": "max", "seed": 0}


def drivers(cluster: FakeCluster, tmp_path: Path) -> None:
    """checkpoint_now writes a checkpoint file; exploit takes any."""

    def checkpoint_now(trial: str, timeout: float) -> dict[str, Any]:
        path = tmp_path / trial / "checkpoints" / "checkpoint_00000002.ftrl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"weights")
        return {"path": str(path), "iteration": 2, "saved_at": time.time()}

    cluster.methods["checkpoint_now"] = checkpoint_now
    cluster.methods["exploit"] = lambda trial, path, hyperparams, timeout: {"applied_at": time.time(),
                                                                            "weights_version": 9}


def lineage(expdir: Path) -> list[dict[str, Any]]:
    path = expdir / LINEAGE_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_bottom_trial_clones_the_top_one_in_place(tmp_path, no_exit):
    cluster = FakeCluster(cpus=8.0)
    drivers(cluster, tmp_path)
    expdir = experiment(tmp_path, 2, scheduler=PBT, stop={"iteration": 100})
    tuner = TuneController(str(expdir), client=cluster)
    try:
        wait_until(lambda: len(cluster.submitted) == 2, what="both trials submitted")
        cluster.report("exp-0", iteration=2, score=10.0)
        cluster.report("exp-1", iteration=2, score=1.0)
        [row] = wait_until(lambda: lineage(expdir), what="an exploit")
        assert (row["target"], row["donor"], row["weights_version"]) == ("exp-1", "exp-0", 9)
        assert row["donor_checkpoint"] == str(expdir / "exp-0" / "pinned" / "checkpoint_00000002.ftrl")
        assert Path(row["donor_checkpoint"]).read_bytes() == b"weights"
        assert [c[:2] for c in cluster.calls] == [("exp-0", "checkpoint_now"), ("exp-1", "exploit")]
        assert cluster.calls[1][2][:2] == (row["donor_checkpoint"], {"lr": row["new_config"]["lr"]})
        state = wait_until(lambda: (s := read_state(expdir))["pbt"]["num_exploits"] == 1 and s, what="saved")
        assert state["trials"]["exp-1"]["config"] == row["new_config"] and state["trials"]["exp-1"]["num_exploits"] == 1
        assert state["counters"]["num_exploits"] == 1 and state["pending_exploits"] == {}
        assert [j for j, _ in cluster.submitted] == ["exp-0", "exp-1"]  # in place: nothing restarted
    finally:
        end(tuner)


def test_a_restarted_tuner_follows_running_jobs_and_makes_a_saved_decision_again(tmp_path, no_exit):
    cluster = FakeCluster(cpus=8.0)
    drivers(cluster, tmp_path)
    pinned = str(tmp_path / "exp-0" / "pinned" / "checkpoint_00000002.ftrl")
    decision = {"donor": "exp-0", "checkpoint": pinned, "hyperparams": {"lr": 3e-3}, "asked": time.time()}
    expdir = experiment(tmp_path, 2, scheduler=PBT, stop={"iteration": 100},
                        pending_exploits={"exp-1": decision})
    state = read_state(expdir)
    for trial in state["trials"].values():
        trial["status"], trial["started_at"] = "RUNNING", time.time()
    write_state(expdir, state)
    for tid in ("exp-0", "exp-1"):  # the jobs its predecessor started still run
        cluster.submit({}, job_id=tid, output_dir="", resume=False)
    cluster.submitted.clear()
    tuner = TuneController(str(expdir), client=cluster)
    try:
        [row] = wait_until(lambda: lineage(expdir), what="the saved exploit made again")
        assert (row["target"], row["donor"], row["donor_checkpoint"]) == ("exp-1", "exp-0", pinned)
        assert cluster.calls == [("exp-1", "exploit", (pinned, {"lr": 3e-3}, 5.0))]
        wait_until(lambda: read_state(expdir)["pending_exploits"] == {}, what="the decision taken")
        assert cluster.submitted == []  # both jobs followed, none submitted again
        assert read_state(expdir)["trials"]["exp-1"]["config"] == {"lr": 3e-3}
    finally:
        end(tuner)


def test_a_population_larger_than_the_cluster_takes_turns(tmp_path, no_exit):
    """4 PBT members on room for 2 (Tune's time-sharing): a trial at its perturbation point
    yields its room to the waiting trial furthest behind it and shows PAUSED; its turn comes
    back once the others caught up; every member advances."""
    cluster = FakeCluster(cpus=4.0)
    drivers(cluster, tmp_path)
    expdir = experiment(tmp_path, 4, cpu=2.0, scheduler=PBT, stop={"iteration": 6})
    tuner = TuneController(str(expdir), client=cluster)

    def submits(tid: str) -> int:
        return [j for j, _ in cluster.submitted].count(tid)

    try:
        wait_until(lambda: submits("exp-0") == 1 and submits("exp-1") == 1, what="two trials running")
        assert submits("exp-2") == submits("exp-3") == 0
        cluster.report("exp-1", iteration=1, score=2.0)
        cluster.report("exp-0", iteration=2, score=1.0)  # its perturbation point: cloned, then it yields
        wait_until(lambda: trial_status(expdir, "exp-0") == "PAUSED", what="exp-0 PAUSED")
        assert ("exp-0", "paused: yields its turn to exp-2") in cluster.stopped
        wait_until(lambda: submits("exp-2") == 1, what="exp-2 started in exp-0's room")
        trial = read_state(expdir)["trials"]["exp-0"]
        assert trial["paused_because"] == "yielded its turn" and trial["num_pauses"] == 1
        assert trial["num_exploits"] == 1  # the exploit was done before it yielded
        cluster.report("exp-1", iteration=2, score=2.0)
        wait_until(lambda: submits("exp-3") == 1, what="exp-3 started in exp-1's room")
        # the newcomers reach the others' time (2): nobody behind them waits, they run on
        cluster.report("exp-2", iteration=2, score=0.5)
        cluster.report("exp-3", iteration=2, score=0.7)
        time.sleep(0.6)
        assert submits("exp-0") == submits("exp-1") == 1
        status = tuner.status()
        assert status["trials"]["exp-2"]["status"] == status["trials"]["exp-3"]["status"] == "RUNNING"
        # at their next point the paused ones (behind, at 2) get their turn back, resuming
        cluster.report("exp-2", iteration=4, score=0.5)
        cluster.report("exp-3", iteration=4, score=0.7)
        wait_until(lambda: submits("exp-0") == 2 and submits("exp-1") == 2, what="exp-0 and exp-1 resumed")
        wait_until(lambda: {t: s for t, s in ((t, trial_status(expdir, t)) for t in ("exp-2", "exp-3"))}
                   == {"exp-2": "PAUSED", "exp-3": "PAUSED"}, what="exp-2 and exp-3 PAUSED")
        state = read_state(expdir)
        assert state["counters"]["num_pauses"] == 4 and state["counters"]["num_preemptions"] == 0
        times = {tid: m["time"] for tid, m in state["pbt"]["members"].items()}
        assert max(times.values()) - min(times.values()) <= 2  # within one perturbation interval
        assert state["pbt"]["members"]["exp-2"]["paused"] and not state["pbt"]["members"]["exp-0"]["paused"]
    finally:
        end(tuner)
    # the experiment stopped: the running ones PAUSED because of it, the waiting ones still waiting
    trials = read_state(expdir)["trials"]
    assert trials["exp-0"]["paused_because"] == "experiment stopped"
    assert trials["exp-2"]["paused_because"] == "yielded its turn"
