"""Atari smoke run: PPO with the default CNN on Pong, on the CPU, a few hundred env steps,
sampling in the driver and then on a remote runner (which infers with torch by itself)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ale_py", reason="Atari needs ale-py: pip install 'ftrl[atari]'")
pytest.importorskip("cv2", reason="Atari preprocessing needs opencv: pip install 'ftrl[atari]'")

from ftrl.config import PPOConfig
from ftrl.rl.models.cnn import ConvActorCritic


def _config(num_env_runners: int) -> PPOConfig:
    return (
        PPOConfig()
        .environment("atari:ALE/Pong-v5")
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=2, rollout_fragment_length=64)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )


@pytest.mark.parametrize("num_env_runners", [0, 1])
def test_ppo_trains_a_cnn_on_pong(num_env_runners, make_cluster):
    t0 = time.monotonic()
    client = make_cluster(slots=2).client() if num_env_runners else None
    algo = _config(num_env_runners).build(client=client, job_name=f"pong{num_env_runners}")
    try:
        assert isinstance(algo.learner.model, ConvActorCritic)
        _, before = algo.get_weights()
        for _ in range(2):
            result = algo.train()
        assert result["env_steps_sampled"] == 512
        _, after = algo.get_weights()
        assert np.isfinite(after).all() and not np.array_equal(after, before)
        if num_env_runners:
            assert result["num_healthy_env_runners"] == 1
    finally:
        algo.stop()
        if client is not None:
            client.close()
    assert time.monotonic() - t0 < 60


def test_appo_trains_a_cnn_on_pong_from_a_remote_runner(make_cluster):
    """The asynchronous path with the CNN: a runner on the cluster samples Pong with torch,
    the learner thread learns off the queue."""
    from ftrl.config import APPOConfig

    client = make_cluster(slots=2).client()
    config = (APPOConfig().environment("atari:ALE/Pong-v5")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=32)
              .training(train_batch_size=128).reporting(min_time_s_per_iteration=0.0).debugging(seed=0))
    algo = config.build(client=client, job_name="pong-appo")
    try:
        assert isinstance(algo.learner.model, ConvActorCritic)
        _, before = algo.get_weights()
        rows = [algo.train() for _ in range(3)]
        assert sum(r["num_learner_updates_this_iter"] for r in rows) >= 3
        assert rows[-1]["env_steps_trained"] >= 3 * 128
        _, after = algo.get_weights()
        assert np.isfinite(after).all() and not np.array_equal(after, before)
    finally:
        algo.stop()
        client.close()


@pytest.mark.parametrize("env", ["atari:ALE/Pong-v5", "ftrl.testing.envs:make_pixel_env"])
def test_a_trained_pixel_policy_is_watched_with_a_video(env, tmp_path):
    """`ftrl evaluate`'s episodes on Atari (render_mode through gymnasium.make, the
    standard wrappers kept) and on an env by import path (render_mode in its env_config):
    an MP4 of length + 1 frames (the Pong episode cut at 40 steps)."""
    from ftrl.rl.driver.algorithm import Algorithm
    from ftrl.rl.driver.watch import watch
    from ftrl.rl.video import count_frames
    from tests.trained import train_and_checkpoint

    train_and_checkpoint(_config(0).environment(env).training(train_batch_size=128), tmp_path / "run")
    loaded = Algorithm.from_checkpoint(tmp_path / "run")
    try:
        out = watch(loaded, episodes=1, seed=0, video_dir=tmp_path / "video", max_steps=40)
    finally:
        loaded.stop()
    (video,) = out["videos"]
    assert out["lengths"][0] == (40 if env.startswith("atari") else 20)
    assert count_frames(video) == out["lengths"][0] + 1
