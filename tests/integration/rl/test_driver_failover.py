"""A job's driver lost with its node, or SIGKILLed twice in a row: the restarted driver
resumes from the newest state that exists (no iteration redone but the one in flight,
no row of metrics.jsonl ever removed), and its counters are the runtime's truth.

Each test runs a real coordinator and two real workers; a node is lost the way a
machine is: its worker and every actor process on it SIGKILLed at once."""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
from pathlib import Path

import pytest

from tests.cluster import wait_until

JOB = {"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 2, "num_envs_per_env_runner": 4,
       "train_batch_size": 256, "minibatch_size": 128, "num_epochs": 2, "seed": 0,
       "stop": {"stop_iters": 100_000}}


class RowWatch:
    """Reads metrics.jsonl every 20 ms while the test runs and records every time a
    row it saw before is gone or an iteration shows up twice (a rollback)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: list[int] = []
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self) -> list[int]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line)["iteration"] for line in lines if line.endswith("}")]

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            now = self._read()
            if now[:len(self.seen)] != self.seen:
                self.violations.append(f"rows {self.seen[-3:]}... became {now[-3:]}")
            if len(set(now)) != len(now):
                self.violations.append(f"an iteration written twice: {now[-5:]}")
            self.seen = now if len(now) >= len(self.seen) else self.seen

    def close(self) -> list[int]:
        self._stop.set()
        self._thread.join(5)
        return self._read()


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]


def _runtime_restarts(client, prefix: str) -> int:
    return sum(a["restarts"] for a in client.actors(prefix=prefix))


def _kill_node(cluster, node_id: str) -> None:
    """The node is lost: its worker and every actor process on it, at once."""
    proc = cluster.worker_procs[node_id]
    os.killpg(proc.pid, signal.SIGKILL)  # the worker leads its process group; actors are in it
    proc.wait(10)


@pytest.mark.parametrize("learners, checkpoint_interval", [(0, 1000), (2, 1000), (0, 3), (2, 3)],
                         ids=["0-learners-before-checkpoint", "2-learners-before-checkpoint",
                              "0-learners-after-checkpoint", "2-learners-after-checkpoint"])
def test_node_with_the_driver_lost_costs_no_iteration(make_cluster, tmp_path, learners, checkpoint_interval):
    cluster = make_cluster(workers=2, slots=4)
    client = cluster.client()
    out = tmp_path / "job"
    client.submit({**JOB, "num_learners": learners, "checkpoint_interval": checkpoint_interval},
                  job_id="nl", output_dir=str(out))
    watch = RowWatch(out / "metrics.jsonl")
    try:
        wait_until(lambda: len(watch.seen) >= 7, 180, what="seven iterations")
        driver = client.actor("nl/algorithm")
        before = len(watch.seen)
        _kill_node(cluster, driver["node_id"])
        moved = wait_until(lambda: (a := client.actor("nl/algorithm"))["state"] == "ALIVE"
                           and a["incarnation"] != driver["incarnation"] and a, 120,
                           what="the driver restarted on the other node")
        assert moved["node_id"] != driver["node_id"]
        wait_until(lambda: len(watch.seen) >= before + 5, 180, what="five iterations after the node loss")
        status = client.stop("nl", wait=True, timeout=120)
    finally:
        iterations = watch.close()
    assert status["stage"] == "STOPPED", status
    assert not watch.violations, watch.violations  # no row removed, no iteration redone
    assert iterations == list(range(1, len(iterations) + 1))
    rows = _rows(out)
    last = rows[-1]
    # the runtime's truth: every runner and learner that moved counts, once
    assert last["num_env_runner_restarts"] == _runtime_restarts(client, "nl/env_runner/"), last
    assert last["num_env_runner_failures"] >= last["num_env_runner_restarts"]
    if learners:
        assert last["num_learner_restarts"] == _runtime_restarts(client, "nl/learner/"), last
        assert last["num_learner_failures"] >= last["num_learner_restarts"]
        assert last["num_learners"] == 2
    # training went on from the newest state: env steps and time never went back
    steps = [r["env_steps_sampled"] for r in rows]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert all(b["time_s"] >= a["time_s"] for a, b in itertools.pairwise(rows))


def test_driver_killed_twice_counts_each_runner_restart_once(make_cluster, tmp_path):
    """A runner restarts while no driver watches; the next driver counts it, dies right
    after attaching, and the third counts it again from the same state: once in all."""
    cluster = make_cluster(workers=1, slots=3)
    client = cluster.client()
    out = tmp_path / "job"
    client.submit({**JOB, "checkpoint_interval": 1000}, job_id="tw", output_dir=str(out))
    watch = RowWatch(out / "metrics.jsonl")
    try:
        wait_until(lambda: len(watch.seen) >= 5, 180, what="five iterations")
        driver = client.actor("tw/algorithm")
        runner = client.actor("tw/env_runner/0")
        os.kill(driver["pid"], signal.SIGKILL)
        os.kill(runner["pid"], signal.SIGKILL)  # restarts in place while the driver is down
        second = wait_until(lambda: (a := client.actor("tw/algorithm"))["state"] == "ALIVE"
                            and a["incarnation"] > driver["incarnation"] and a, 120, what="the second driver")
        # attached to its runners (and counted the restart), maybe not yet written a state
        wait_until(lambda: (j := client.job_status("tw"))["driver_incarnation"] >= second["incarnation"]
                   and j["stage"] == "RUNNING", 120, what="the second driver running")
        os.kill(second["pid"], signal.SIGKILL)
        wait_until(lambda: (a := client.actor("tw/algorithm"))["state"] == "ALIVE"
                   and a["incarnation"] > second["incarnation"], 120, what="the third driver")
        at_third = len(watch.seen)
        wait_until(lambda: len(watch.seen) >= at_third + 3, 180, what="three iterations of the third driver")
        status = client.stop("tw", wait=True, timeout=120)
    finally:
        iterations = watch.close()
    assert status["stage"] == "STOPPED", status
    assert not watch.violations, watch.violations
    assert iterations == list(range(1, len(iterations) + 1))
    last = _rows(out)[-1]
    runtime = _runtime_restarts(client, "tw/env_runner/")
    assert runtime >= 1
    assert last["num_env_runner_restarts"] == runtime, (last["num_env_runner_restarts"], runtime)
    assert last["num_env_runner_failures"] == runtime
