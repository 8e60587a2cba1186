"""Atari envs ("atari:ALE/Pong-v5"): the standard wrappers, (4, 84, 84) uint8 frames,
episodic life and reward clipping in training only."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ale_py", reason="Atari needs ale-py: pip install 'ftrl[atari]'")
pytest.importorskip("cv2", reason="Atari preprocessing needs opencv: pip install 'ftrl[atari]'")

from ftrl.config import PPOConfig
from ftrl.rl.sampling.atari import EpisodicLife, atari_id
from ftrl.rl.sampling.env_factory import make_env
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.spaces import space_spec
from ftrl.wire.errors import ConfigError


def _wrappers(env: gym.Env) -> list[str]:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


def test_atari_ids():
    assert atari_id("atari:ALE/Breakout-v5") == "ALE/Breakout-v5"
    assert atari_id("atari:Pong") == "ALE/Pong-v5"
    assert atari_id("CartPole-v1") is None
    with pytest.raises(ConfigError, match="names no game"):
        atari_id("atari:")


def test_pong_frames_are_4x84x84_uint8():
    env = make_env("atari:ALE/Pong-v5")
    try:
        assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert env.unwrapped._frameskip == 1  # the wrappers skip frames
        for _ in range(20):
            obs, reward, *_ = env.step(env.action_space.sample())
        assert obs.shape == (4, 84, 84) and reward in (-1.0, 0.0, 1.0)
        assert _wrappers(env)[:4] == ["FrameStackObservation", "TransformReward", "EpisodicLife", "AtariPreprocessing"]
        spec = space_spec(env.observation_space, env.action_space)
        assert spec.obs_dtype == "uint8" and spec.obs_dim == 4 * 84 * 84
    finally:
        env.close()


def test_wrapper_options_and_errors():
    env = make_env("atari:Pong", {"episodic_life": False, "clip_rewards": False, "frame_stack": 2})
    assert env.observation_space.shape == (2, 84, 84)
    assert "EpisodicLife" not in _wrappers(env) and "TransformReward" not in _wrappers(env)
    env.close()
    with pytest.raises(ConfigError, match="frame_skip"):
        make_env("atari:Pong", {"frameskip": 4})
    with pytest.raises(ConfigError, match="cannot make environment 'atari:ALE/Pongg-v5'"):
        make_env("atari:ALE/Pongg-v5")


def test_a_lost_life_ends_the_training_episode_but_not_the_game():
    env = make_env("atari:ALE/Breakout-v5", {"noop_max": 0})
    try:
        life = next(w for w in _iter_wrappers(env) if isinstance(w, EpisodicLife))
        env.reset(seed=0)
        env.action_space.seed(0)
        assert life.lives == 5
        for _ in range(5000):
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                break
        assert terminated and not life.game_over and life.lives == 4
        env.reset()
        assert life.lives == 4  # the game went on
    finally:
        env.close()


def _iter_wrappers(env: gym.Env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def test_evaluation_runners_have_neither_episodic_life_nor_clipping():
    config = (PPOConfig().environment("atari:ALE/Pong-v5")
              .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=8)
              .evaluation(evaluation_interval=1, evaluation_config={"env_config": {"frame_stack": 4}}))
    train = EnvRunner(config, set_torch_threads=False)
    evaluation = EnvRunner(config, evaluation=True, set_torch_threads=False)
    try:
        assert "episodic_life" not in train.env_config
        assert evaluation.env_config == {"episodic_life": False, "clip_rewards": False, "frame_stack": 4}
        assert {"EpisodicLife", "TransformReward"} <= set(_wrappers(train._envs[0].env))
        assert not {"EpisodicLife", "TransformReward"} & set(_wrappers(evaluation._envs[0].env))
        assert train.policy.backend == evaluation.policy.backend == "torch"  # the CNN
        batch = train.sample()["batch"]
        assert batch["obs"].shape == (8, 1, 4 * 84 * 84) and batch["obs"].dtype == np.uint8  # frames as bytes
    finally:
        train.stop()
        evaluation.stop()
