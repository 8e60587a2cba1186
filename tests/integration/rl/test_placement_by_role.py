"""Placement by role on real processes: a head worker advertising `ondemand` and two spot
workers advertising `spot`. A job whose driver and learners ask for `ondemand` and whose
runners ask for `spot` (the seed's layout) has its driver and learner only on the head,
its runners only on spot workers, packed onto one (PACK). A role asking for a resource no
worker has waits PENDING and `ftrl status JOB` says why."""

from __future__ import annotations

import os
import subprocess
import sys

import ftrl
from tests.cluster import cluster_env, wait_until


def _job() -> ftrl.PPOConfig:
    return (ftrl.PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2, custom_resources_per_env_runner={"spot": 1})
            .learners(num_learners=1, custom_resources_per_learner={"ondemand": 1})
            .resources(custom_resources_for_main_process={"ondemand": 0.5})
            .training(train_batch_size=256, minibatch_size=128, num_epochs=1)
            .debugging(seed=0))


def test_drivers_and_learners_only_on_the_ondemand_node(make_cluster, tmp_path):
    cluster = make_cluster(workers=0, slots=4)
    cluster.start_worker(node_id="head", extra=["--resources", "ondemand=2"])
    cluster.start_worker(node_id="spot-1", extra=["--resources", "spot=4"])
    cluster.start_worker(node_id="spot-2", extra=["--resources", "spot=4"])
    cluster.wait_nodes(["head", "spot-1", "spot-2"])
    client = cluster.client()
    job = client.submit(_job(), job_id="seed", output_dir=str(tmp_path / "seed"))
    wait_until(lambda: client.job_status(job)["iteration"] >= 2, timeout=120, interval=0.2, what="2 iterations")
    placed = {a["name"]: a["node_id"] for a in client.actors("seed/") if a["state"] == "ALIVE"}
    assert placed["seed/algorithm"] == "head" and placed["seed/learner/0"] == "head"
    runners = {placed["seed/env_runner/0"], placed["seed/env_runner/1"]}
    assert len(runners) == 1 and runners <= {"spot-1", "spot-2"}  # PACK: one spot node holds the role
    resources = {a["name"]: a["resources"] for a in client.actors("seed/")}
    assert resources["seed/env_runner/0"] == {"cpu": 1.0, "spot": 1.0}
    assert resources["seed/algorithm"] == {"cpu": 0.0, "ondemand": 0.5}
    client.stop(job, wait=True, timeout=60)
    # a learner asking for what no worker has waits, and the status says why
    stuck = client.submit(_job().learners(custom_resources_per_learner={"tpu": 1}), job_id="stuck",
                          output_dir=str(tmp_path / "stuck"))
    wait_until(lambda: client.actor("stuck/learner/0")["state"] == "PENDING", timeout=60, interval=0.2,
               what="the learner PENDING")
    status = subprocess.run([sys.executable, "-m", "ftrl", "status", stuck, "--coordinator", cluster.address,
                             "--token-file", str(cluster.token_file)],
                            capture_output=True, text=True, timeout=60, env={**os.environ, **cluster_env()})
    assert status.returncode == 0, status.stderr
    assert "stuck/learner/0: no ALIVE worker offers tpu=1" in status.stdout, status.stdout
    client.stop(stuck, wait=True, timeout=60)
