"""Atari envs ("atari:ALE/Pong-v5"): the standard wrappers, (4, 84, 84) uint8 frames,
episodic life and reward clipping in training only."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ale_py", reason="Atari needs ale-py: pip install 'ftrl[atari]'")
pytest.importorskip("cv2", reason="Atari preprocessing needs opencv: pip install 'ftrl[atari]'")

from ftrl.config import PPOConfig
from ftrl.rl.sampling.atari import EpisodicLife, atari_id, definition, needs_fire
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
        assert _wrappers(env)[:6] == ["FrameStackObservation", "TransformReward", "FireOnReset", "EpisodicLife",
                                      "GameStats", "AtariPreprocessing"]
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


def _step_until_the_end(env: gym.Env, limit: int) -> tuple[int, bool, bool]:
    """NOOPs until the episode ends: (steps taken, terminated, truncated)."""
    for steps in range(1, limit + 1):
        *_, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            return steps, terminated, truncated
    return limit, False, False


def test_a_time_limit_ends_the_game_so_the_next_reset_starts_a_new_one():
    """max_episode_steps on Atari counts the game's steps over its lives; a cut game is
    over (episodic life resets it, not the next life) and its whole score is counted."""
    env = make_env("atari:ALE/Breakout-v5", {"noop_max": 0, "fire_reset": True}, max_episode_steps=10)
    try:
        life = next(w for w in _iter_wrappers(env) if isinstance(w, EpisodicLife))
        env.reset(seed=0)
        assert _step_until_the_end(env, 40) == (10 - 2, False, True)  # fire on reset took two steps
        assert life.game_over and life.lives == 5
        env.reset()
        assert life.lives == 5 and not life.game_over
        assert _step_until_the_end(env, 40) == (10 - 2, False, True)  # counted again from the new game's start
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


def _steps_to_lose_a_life(env: gym.Env, limit: int) -> int | None:
    """NOOPs from a reset until the first terminal step (a lost life), None within `limit`."""
    env.reset(seed=0)
    for t in range(limit):
        *_, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            return t + 1
    return None


def test_fire_on_reset_starts_games_that_wait_for_fire():
    """Breakout's ball is launched by FIRE: a NOOP-only player with fire on reset loses a
    life soon, one without never does (the ball is never in play)."""
    fired = make_env("atari:ALE/Breakout-v5", {"noop_max": 0})
    unfired = make_env("atari:ALE/Breakout-v5", {"noop_max": 0, "fire_reset": False})
    freeway = make_env("atari:ALE/Freeway-v5")
    try:
        assert "FireOnReset" in _wrappers(fired) and "FireOnReset" not in _wrappers(unfired)
        assert needs_fire(fired) and not needs_fire(freeway) and "FireOnReset" not in _wrappers(freeway)
        lost = _steps_to_lose_a_life(fired, 2000)
        assert lost is not None and lost < 500
        assert _steps_to_lose_a_life(unfired, 2000) is None
        assert _steps_to_lose_a_life(fired, 2000) is not None  # again after the lost life's reset
    finally:
        for env in (fired, unfired, freeway):
            env.close()
    with pytest.raises(ConfigError, match="fire_reset"):
        make_env("atari:Pong", {"fire_reset": "yes"})


def test_training_rows_get_the_real_game_beside_the_clipped_lives():
    """Breakout: 5 lives a game, rewards 1/4/7 clipped to 1. The runner's episodes are
    lives; the game's unclipped return and length arrive with the episode that ends it."""
    config = (PPOConfig().environment("atari:ALE/Breakout-v5", env_config={"noop_max": 0})
              .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=256).debugging(seed=1))
    runner = EnvRunner(config, set_torch_threads=False)
    try:
        returns, lengths, game_returns, game_lengths = [], [], [], []
        for _ in range(40):
            episodes = runner.sample()["episodes"]
            returns += list(episodes["returns"])
            lengths += list(episodes["lengths"])
            game_returns += list(episodes["custom"]["game_return"])
            game_lengths += list(episodes["custom"]["game_length"])
            if sum(g == g for g in game_returns) >= 1:
                break
    finally:
        runner.stop()
    assert len(game_returns) == len(returns)  # one value per episode (NaN: a life, not a game)
    end = next(j for j, g in enumerate(game_returns) if g == g)
    assert end == 4  # the fifth life ends the first game
    # the game's steps the lives do not count: FIRE and 2 after its reset, and after each of
    # the 4 lost lives the no-op that goes on from there, FIRE and 2
    assert game_lengths[end] == sum(lengths[: end + 1]) + 2 + 3 * 4
    assert game_returns[end] >= sum(returns[: end + 1])  # bricks score 1, 4 or 7; clipped to 1 a hit
    assert all(r in (0.0, 1.0) or r == int(r) for r in returns)


def test_the_atari_definition_names_every_setting():
    d = definition("atari:Pong", {"repeat_action_probability": 0.0})
    assert d["env"] == "ALE/Pong-v5" and d["repeat_action_probability"] == 0.0
    for key in ("frame_skip", "noop_max", "screen_size", "frame_stack", "episodic_life", "clip_rewards",
                "fire_reset", "full_action_space", "max_num_frames_per_episode", "score"):
        assert key in d
