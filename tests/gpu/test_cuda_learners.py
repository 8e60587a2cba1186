"""Learners on CUDA and the learner mesh over NCCL, on a real GPU.

Skipped without a CUDA device (CI has none): run `pytest tests/gpu` on a GPU machine.
With one GPU, NCCL worlds are of one rank (NCCL refuses two ranks on one GPU), so these
tests check what one GPU can show: the NCCL group is formed, reduces, is aborted and
formed again in a new epoch; a learner killed mid-run comes back on its GPU and the
mesh re-forms; a checkpoint moves between a GPU learner and a CPU one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

from ftrl.config import PPOConfig
from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.learning.mesh import EpochMesh, MeshChanged
from ftrl.rl.sampling.env_runner import EnvRunner
from tests.cluster import cluster_env, new_cluster

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.timeout(300)]

CUDA = torch.device("cuda", 0)


def _allreduce(mesh: EpochMesh, tensor: torch.Tensor) -> None:
    """A real NCCL all-reduce through the mesh's wait path (the mesh skips a world of one)."""
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    mesh._complete(mesh.pg.allreduce([tensor], opts), "allreduce")


def test_mesh_on_cuda_uses_nccl_and_forms_again_after_an_abort():
    mesh = EpochMesh("127.0.0.1", 60.0, CUDA)
    try:
        assert mesh.backend == "nccl"
        for epoch in (1, 2, 3):
            took = mesh.enter(epoch, 0, 1, mesh.store_address, f"test/{epoch}/")
            assert took < 30
            t = torch.arange(1, 5, dtype=torch.float32, device=CUDA) * epoch
            _allreduce(mesh, t)
            torch.cuda.synchronize()
            assert t.cpu().tolist() == [epoch * x for x in (1.0, 2.0, 3.0, 4.0)]
            t0 = time.monotonic()
            mesh.abort_below(epoch + 1)  # ProcessGroupNCCL.abort, as when a peer is lost
            assert time.monotonic() - t0 < 10
            with pytest.raises(MeshChanged):
                mesh.allreduce_(t)
    finally:
        mesh.close()


def _learner_pair(seed: int = 3):
    cfg = (PPOConfig().environment("CartPole-v1")
           .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=64)
           .training(train_batch_size=256, minibatch_size=64, num_epochs=2)
           .debugging(seed=seed))
    runner = EnvRunner(cfg, set_torch_threads=False)
    cpu = PPOLearner(cfg, runner.spec)
    gpu = PPOLearner(cfg, runner.spec, device=CUDA)
    return runner, cpu, gpu


def test_ppo_learner_on_cuda_follows_the_cpu_learner_and_checkpoints_cross_devices():
    runner, cpu, gpu = _learner_pair()
    assert next(gpu.model.parameters()).device.type == "cuda"
    w0 = cpu.get_weights()[1]
    assert np.array_equal(w0, gpu.get_weights()[1])  # same seed, same init
    runner.set_weights(*cpu.get_weights())
    frag = runner.sample()["batch"]
    s_cpu = cpu.update([frag], env_steps_sampled=256)
    s_gpu = gpu.update([frag], env_steps_sampled=256)
    assert s_gpu["weights_version"] == s_cpu["weights_version"] == 1
    w_cpu, w_gpu = cpu.get_weights()[1], gpu.get_weights()[1]
    assert w_gpu.dtype == np.float32 and np.isfinite(w_gpu).all() and not np.array_equal(w_gpu, w0)
    # float32 on two devices: the same update up to rounding
    np.testing.assert_allclose(w_gpu, w_cpu, rtol=0, atol=2e-4)
    # a GPU learner's checkpoint resumes on a CPU learner and back, bit for bit
    state = gpu.get_state()
    _, cpu2, gpu2 = _learner_pair(seed=4)
    cpu2.set_state(state)
    assert np.array_equal(cpu2.get_weights()[1], w_gpu)
    gpu2.set_state(cpu2.get_state())
    assert gpu2.digest() == gpu.digest()
    assert next(gpu2.model.parameters()).device.type == "cuda"
    # and both go on training from it
    runner.set_weights(*gpu2.get_weights())
    frag2 = runner.sample()["batch"]
    assert gpu2.update([frag2])["weights_version"] == 2
    assert cpu2.update([frag2])["weights_version"] == 2


def test_gpu_learner_actor_gets_its_gpu_and_a_killed_one_rejoins_on_it():
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=8, sample_timeout_s=60.0)
              .training(train_batch_size=1024, minibatch_size=128, num_epochs=4)
              .learners(num_learners=1, num_gpus_per_learner=1, learner_collective_timeout_s=30.0)
              .debugging(seed=5))
    with new_cluster(workers=1, slots=4, actor_hang_timeout=60.0, worker_args=["--gpus", "1"]) as cluster:
        client = cluster.client()
        algo = config.build(client=client, job_name="gpu")
        try:
            first = algo.train()
            assert first["learner_backend"] == "nccl" and first["learner_device"] == "cuda:0"
            assert first["num_learners"] == 1 and first["weights_version"] == 1
            info = client.actor("gpu/learner/0")
            os.kill(int(info["pid"]), signal.SIGKILL)
            deadline = time.monotonic() + 120
            result = algo.train()
            while result["num_learner_reformations"] < 2 and time.monotonic() < deadline:
                result = algo.train()
            assert result["num_learner_reformations"] >= 2, result
            assert result["learner_backend"] == "nccl"
            assert result["weights_version"] >= 2
            assert client.actor("gpu/learner/0")["incarnation"] >= 2
            after = algo.train()
            assert after["weights_version"] == result["weights_version"] + 1
        finally:
            algo.stop()


def test_ftrl_train_on_the_embedded_cluster_puts_the_learner_on_the_gpu(tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "ftrl", "train", "--env", "CartPole-v1", "--output", str(out),
            "--num-env-runners", "1", "--num-learners", "1", "--set", "num_gpus_per_learner=1",
            "--stop-iters", "4", "--quiet"]
    proc = subprocess.run(argv, env={**os.environ, **cluster_env()}, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert {r["learner_backend"] for r in rows} == {"nccl"}
    assert {r["learner_device"] for r in rows} == {"cuda:0"}


def test_two_learners_on_one_gpu_are_refused_before_anything_starts(tmp_path):
    if torch.cuda.device_count() > 1:
        pytest.skip("this machine has several GPUs")
    argv = [sys.executable, "-m", "ftrl", "train", "--env", "CartPole-v1", "--output", str(tmp_path / "r"),
            "--num-learners", "2", "--set", "num_gpus_per_learner=1", "--stop-iters", "1"]
    proc = subprocess.run(argv, env={**os.environ, **cluster_env()}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs 2 GPU(s)" in proc.stderr and "shows 1" in proc.stderr


def test_appo_learner_on_cuda_follows_the_cpu_learner_with_its_target_network():
    """APPO on the GPU (pinned host memory, non-blocking copies) takes the same steps as
    on the CPU, up to float rounding, and its state (target network included) moves
    between the devices."""
    from ftrl.config import APPOConfig
    from ftrl.rl.algorithms.appo import APPOLearner

    cfg = (APPOConfig().environment("CartPole-v1")
           .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
           .training(train_batch_size=256, num_epochs=2, minibatch_size=128, target_network_update_freq=1)
           .debugging(seed=3))
    runner = EnvRunner(cfg, set_torch_threads=False)
    cpu = APPOLearner(cfg, runner.spec)
    gpu = APPOLearner(cfg, runner.spec, device=CUDA)
    assert np.array_equal(cpu.get_weights()[1], gpu.get_weights()[1])
    runner.set_weights(*cpu.get_weights())
    frags = [runner.sample()["batch"]]
    for _ in range(3):
        cpu.update(frags)
        gpu.update(frags)
    np.testing.assert_allclose(gpu.get_weights()[1], cpu.get_weights()[1], rtol=0, atol=5e-4)
    assert gpu._target_flat.device.type == "cuda"
    twin = APPOLearner(cfg, runner.spec)
    twin.set_state(gpu.get_state())
    np.testing.assert_array_equal(twin._target_flat.numpy(), gpu._target_flat.cpu().numpy())
