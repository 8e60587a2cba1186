"""Runners that infer on a GPU (`num_gpus_per_env_runner`), on a real GPU.

Skipped without a CUDA device (CI has none): run `pytest tests/gpu` on a GPU machine.
A CNN policy on the GPU acts as the same policy on the CPU (uint8 frames go to the GPU
as bytes); two runners sharing one GPU (0.5 each) sample Pong-sized frames for APPO,
and a runner SIGKILLed mid-run comes back on its GPU share with current weights.
"""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from ftrl.config import APPOConfig
from ftrl.rl.models.policy import TorchPolicy
from ftrl.rl.spaces import space_spec
from tests.cluster import new_cluster

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.timeout(300)]


def test_a_cnn_policy_on_the_gpu_acts_as_on_the_cpu():
    spec = space_spec(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6))
    cpu = TorchPolicy(spec, seed=0)
    gpu = TorchPolicy(spec, seed=1, device="cuda")
    gpu.set_flat(cpu.get_flat())
    frames = np.random.default_rng(0).integers(0, 256, (8, spec.obs_dim), dtype=np.uint8)
    a_cpu, lp_cpu, v_cpu = cpu.act(frames, explore=False)
    a_gpu, lp_gpu, v_gpu = gpu.act(frames, explore=False)
    assert a_gpu.dtype == a_cpu.dtype and np.array_equal(a_gpu, a_cpu)
    np.testing.assert_allclose(lp_gpu, lp_cpu, atol=1e-4)
    np.testing.assert_allclose(v_gpu, v_cpu, atol=1e-4)
    np.testing.assert_allclose(gpu.get_flat(), cpu.get_flat())


def test_two_runners_share_a_gpu_and_a_killed_one_comes_back_on_it():
    config = (APPOConfig().environment("ftrl.testing.envs:make_pixel_env")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=8, rollout_fragment_length=32,
                           num_gpus_per_env_runner=0.5, sample_timeout_s=60.0)
              .training(train_batch_size=512).debugging(seed=3))
    with new_cluster(workers=1, slots=4, actor_hang_timeout=60.0, worker_args=["--gpus", "1"]) as cluster:
        client = cluster.client()
        algo = config.build(client=client, job_name="gpur")
        try:
            first = algo.train()
            assert first["num_healthy_env_runners"] == 2
            info = client.actor("gpur/env_runner/1")
            os.kill(int(info["pid"]), signal.SIGKILL)
            deadline = time.monotonic() + 120
            row = algo.train()
            while row["num_env_runner_restarts"] < 1 and time.monotonic() < deadline:
                row = algo.train()
            assert row["num_env_runner_restarts"] >= 1
            for _ in range(3):
                row = algo.train()
            assert row["num_healthy_env_runners"] == 2 and row["weights_version"] > first["weights_version"]
        finally:
            algo.stop()
