"""Elastic trials on real processes: a spot worker holding one of a trial's two env
runners is SIGKILLed under a running experiment. The trial is not pre-empted: its rows go
on with one runner, and the runner comes back when the worker returns (same node id)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import ftrl
from ftrl.tune.preemption import LOST_GRACE_S
from tests.cluster import wait_until
from tests.integration.tune.test_tune import rows, small_ppo


def test_a_lost_spot_worker_leaves_the_trial_training_with_fewer_runners(make_cluster, tmp_path):
    cluster = make_cluster(workers=2, slots=1)  # room for exactly the two runners: a lost one waits
    client = cluster.client()
    out: dict = {}
    tuner = ftrl.Tuner(small_ppo(runners=2, batch=512).fault_tolerance(env_runner_restore_timeout_s=120.0),
                       run_config=ftrl.RunConfig(name="elastic", storage_path=str(tmp_path), stop={"time_s": 30},
                                                 verbose=0),
                       client=client)
    runner = threading.Thread(target=lambda: out.setdefault("results", tuner.fit()), daemon=True)
    runner.start()
    trial_dir = tmp_path / "elastic" / "elastic-0"

    def placed() -> dict[str, str]:
        actors = {a["name"]: a["node_id"] for a in client.actors()
                  if a["name"].startswith("elastic-0/") and a["state"] == "ALIVE"}
        ok = len([n for n in actors if "/env_runner/" in n]) == 2 and trial_dir.exists()
        return actors if ok and len(rows(trial_dir)) >= 3 else {}

    actors = wait_until(placed, timeout=90, interval=0.2, what="the trial training on 2 runners")
    runner_nodes = {actors[f"elastic-0/env_runner/{i}"] for i in range(2)}
    # prefer a node without the driver (it would restart in place elsewhere: not what is tested)
    victim = sorted(runner_nodes, key=lambda n: n == actors.get("elastic-0/algorithm"))[0]
    os.killpg(cluster.worker_procs[victim].pid, signal.SIGKILL)
    cluster.worker_procs[victim].wait(10)
    wait_until(lambda: any(n["node_id"] == victim and n["state"] == "LOST" for n in client.nodes()),
               timeout=30, interval=0.2, what="the spot node LOST")
    lost_at = len(rows(trial_dir))
    time.sleep(4 * LOST_GRACE_S + 2)  # the tuner sees the runner stranded (it used to pre-empt the trial)
    assert client.actor("elastic-0/env_runner/0" if actors["elastic-0/env_runner/0"] == victim
                        else "elastic-0/env_runner/1")["state"] in ("RESTARTING", "PENDING")
    short = [r for r in rows(trial_dir)[lost_at:] if r.get("num_healthy_env_runners") == 1]
    assert len(short) >= 3  # it trained on with one runner
    state = json.loads((tmp_path / "elastic" / "experiment.json").read_text())
    assert state["trials"]["elastic-0"]["status"] == "RUNNING"
    assert state["trials"]["elastic-0"]["num_preemptions"] == 0
    cluster.start_worker(node_id=victim, slots=1)
    back_from = len(rows(trial_dir))
    wait_until(lambda: any(r.get("num_healthy_env_runners") == 2 for r in rows(trial_dir)[back_from:]),
               timeout=60, interval=0.2, what="the runner back after the worker returned")
    runner.join(120)
    assert not runner.is_alive(), "the experiment did not finish"
    results = out["results"]
    assert results.status == "FINISHED" and results.num_terminated == 1
    state = json.loads((tmp_path / "elastic" / "experiment.json").read_text())
    assert state["trials"]["elastic-0"]["num_preemptions"] == 0 == state["counters"]["num_preemptions"]
    its_rows = rows(trial_dir)
    assert [r["iteration"] for r in its_rows] == list(range(1, len(its_rows) + 1))  # no gap, no repeat
    assert its_rows[-1]["time_s"] >= 30
