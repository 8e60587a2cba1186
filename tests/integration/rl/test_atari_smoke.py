"""Atari smoke run: PPO with the default CNN on Pong, on the CPU, a few hundred env steps,
sampling in the driver and then on a remote runner (which infers with torch by itself);
APPO's CNN runner SIGKILLed mid-sampling and back with the current weights."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

pytest.importorskip("ale_py", reason="Atari needs ale-py: pip install 'ftrl[atari]'")
pytest.importorskip("cv2", reason="Atari preprocessing needs opencv: pip install 'ftrl[atari]'")

from ftrl.config import PPOConfig
from ftrl.rl.models.cnn import ConvActorCritic
from tests.integration.rl.test_train_driver import _actors


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


def test_a_sigkilled_cnn_runner_comes_back_with_the_current_weights(make_cluster):
    """A runner SIGKILLed while it samples Pong (it samples ahead, so always) is restarted
    and samples with the learner's current weights: with max_policy_lag 4 and the learner
    10+ updates in, a runner back on older weights would have its fragments dropped as stale."""
    from ftrl.config import APPOConfig

    client = make_cluster(slots=3).client()
    config = (APPOConfig().environment("atari:ALE/Pong-v5")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=32)
              .training(train_batch_size=128, max_policy_lag=4)
              .reporting(min_time_s_per_iteration=0.0).debugging(seed=0))
    algo = config.build(client=client, job_name="pong-kill")
    try:
        deadline = time.monotonic() + 120
        while algo.learner_version < 10 and time.monotonic() < deadline:
            algo.train()
        (name, pid), = [(n, p) for n, p in _actors("pong-kill").items() if "/env_runner/" in n]
        version_at_kill = algo.learner_version
        os.kill(pid, signal.SIGKILL)
        rows = []
        while time.monotonic() < deadline and not (rows and rows[-1]["num_env_runner_restarts"] >= 1):
            rows.append(algo.train())
        assert rows and rows[-1]["num_env_runner_restarts"] == 1
        dropped = rows[-1]["num_samples_dropped_stale"]
        trained = algo.env_steps_trained
        while algo.env_steps_trained < trained + 4 * 128 and time.monotonic() < deadline:
            rows.append(algo.train())
        assert algo.env_steps_trained >= trained + 4 * 128  # the new runner's fragments were used
        assert rows[-1]["num_samples_dropped_stale"] == dropped  # none of them stale
        assert algo.learner_version >= version_at_kill + 4
        assert _actors("pong-kill")[name] != pid
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
