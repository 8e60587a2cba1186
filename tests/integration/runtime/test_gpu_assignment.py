"""A worker's GPUs handed to actors, on real processes. No GPU is needed: the worker
only sets each actor's CUDA_VISIBLE_DEVICES, which the actors read back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import ftrl
from ftrl.client.cluster import LocalCluster
from ftrl.config import PPOConfig
from ftrl.rl.driver.embedded import cluster_gpus
from ftrl.util.gpus import parse_visible_devices, visible_gpus
from tests.cluster import COUNTER, FAST, cluster_env, wait_until

VISIBLE = "CUDA_VISIBLE_DEVICES"


def test_actors_get_the_gpus_the_worker_was_given_and_keep_them_across_restarts():
    # the worker was started on GPUs 5 and 7 of its machine (SLURM's gres, a shared node)
    with LocalCluster(1, 8, env={**cluster_env(), VISIBLE: "5,7"}, worker_args=["--gpus", "2"],
                      **FAST) as cluster:
        client = cluster.client()
        a = client.create_actor(COUNTER, name="g-a", resources={"cpu": 1, "gpu": 1}, max_restarts=-1)
        b = client.create_actor(COUNTER, name="g-b", resources={"cpu": 1, "gpu": 1})
        cpu_only = client.create_actor(COUNTER, name="g-cpu", resources={"cpu": 1})
        assert sorted([a.call("getenv", VISIBLE), b.call("getenv", VISIBLE)]) == ["5", "7"]
        assert cpu_only.call("getenv", VISIBLE) == ""  # no GPU: none visible, not all of them
        third = client.create_actor(COUNTER, name="g-c", resources={"gpu": 1}, wait=False)
        assert client.actor("g-c")["state"] == "PENDING"  # both GPUs are taken
        # a restarted actor gets a GPU of the worker's again
        os.kill(int(client.actor("g-a")["pid"]), signal.SIGKILL)
        wait_until(lambda: client.actor("g-a")["incarnation"] >= 2 and client.actor("g-a")["state"] == "ALIVE",
                   timeout=30, what="g-a restarted")
        assert wait_until(lambda: a.call("getenv", VISIBLE), timeout=10) in ("5", "7")
        # a GPU freed by a killed actor goes to the waiting one
        gpu_b = b.call("getenv", VISIBLE)
        client.kill_actor("g-b")
        client.wait_actor("g-c", 30)
        assert third.call("getenv", VISIBLE) == gpu_b
        assert {a.call("getenv", VISIBLE), third.call("getenv", VISIBLE)} == {"5", "7"}


def test_a_worker_offered_more_gpus_than_it_may_see_refuses_to_start():
    proc = subprocess.run([sys.executable, "-m", "ftrl", "worker", "--coordinator", "127.0.0.1:1",
                           "--gpus", "3", "--insecure"],
                          env={**os.environ, **cluster_env(), VISIBLE: "5,7"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--gpus 3" in proc.stderr and "lists 2" in proc.stderr


def test_visible_gpus_follow_cuda_visible_devices_else_the_driver(tmp_path):
    assert parse_visible_devices("0,1") == ["0", "1"]
    assert parse_visible_devices("GPU-8f2a,GPU-11c0") == ["GPU-8f2a", "GPU-11c0"]
    assert parse_visible_devices("") == [] and parse_visible_devices("-1") == []
    assert parse_visible_devices("2,-1,3") == ["2"]  # CUDA stops at an invalid entry
    proc_dir = tmp_path / "gpus"
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (proc_dir / bus).mkdir(parents=True)
    assert visible_gpus({}, proc_dir) == ["0", "1"]
    assert visible_gpus({VISIBLE: "3"}, proc_dir) == ["3"]
    assert visible_gpus({}, tmp_path / "no-driver") == []


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_the_embedded_cluster_offers_the_machines_gpus_only_to_gpu_learners():
    def cfg(**learners):
        return PPOConfig().environment("CartPole-v1").learners(**learners)

    assert cluster_gpus(cfg(num_learners=2), visible=[]) == 0
    assert cluster_gpus(cfg(num_learners=2, num_gpus_per_learner=1), visible=["0", "1", "2"]) == 3
    assert cluster_gpus(cfg(num_learners=1, num_gpus_per_learner=0.5), visible=["0"]) == 1
    with pytest.raises(ftrl.ConfigError, match=r"needs 2 GPU\(s\), but this machine shows 1"):
        cluster_gpus(cfg(num_learners=2, num_gpus_per_learner=1), visible=["0"])


def test_runners_given_gpus_count_toward_the_cluster_s_gpus_and_take_a_gpu_share():
    def cfg(runners: int, gpus: float):
        return PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=runners,
                                                                  num_gpus_per_env_runner=gpus)

    assert cluster_gpus(cfg(4, 0.0), visible=["0"]) == 0
    assert cluster_gpus(cfg(4, 0.25), visible=["0"]) == 1  # four runners share one GPU
    assert cfg(4, 0.25).env_runner_resources() == {"cpu": 1.0, "gpu": 0.25}
    with pytest.raises(ftrl.ConfigError, match=r"num_gpus_per_env_runner=0.5 needs 2 GPU\(s\), but this machine"):
        cluster_gpus(cfg(4, 0.5), visible=["0"])
    for bad in (1.5, -0.5):
        with pytest.raises(ftrl.ConfigError, match="num_gpus_per_env_runner"):
            PPOConfig().env_runners(num_gpus_per_env_runner=bad)


@pytest.mark.skipif(torch_cuda(), reason="this machine has a CUDA device")
def test_a_runner_given_a_gpu_where_there_is_no_cuda_says_so():
    from ftrl.rl.models.policy import inference_device
    from ftrl.rl.sampling.env_runner import EnvRunner

    assert inference_device(0.0) == "cpu"
    with pytest.raises(ftrl.ConfigError, match=r"num_gpus_per_env_runner=0\.5, but this runner sees no CUDA device"):
        inference_device(0.5)
    config = PPOConfig().environment("CartPole-v1").env_runners(num_gpus_per_env_runner=0.5)
    with pytest.raises(ftrl.ConfigError, match="sees no CUDA device"):
        EnvRunner(config, worker_index=1, set_torch_threads=False)
    local = EnvRunner(config, worker_index=0, set_torch_threads=False)  # the driver's own: no GPU placed
    try:
        assert local.policy.backend == "numpy"
    finally:
        local.stop()


def test_ftrl_train_with_gpu_learners_on_a_machine_without_enough_gpus_fails_at_once(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ftrl", "train", "--env", "CartPole-v1",
                           "--output", str(tmp_path / "run"), "--num-learners", "1",
                           "--set", "num_gpus_per_learner=1", "--stop-iters", "1"],
                          env={**os.environ, **cluster_env(), VISIBLE: ""},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs 1 GPU(s), but this machine shows 0" in proc.stderr
