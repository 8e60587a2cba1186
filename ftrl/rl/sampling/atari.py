"""Atari through ale-py (`pip install 'ftrl[atari]'`; its wheel ships the ROMs) with the
standard wrappers (Mnih et al. 2015; Machado et al. 2018 for v5's sticky actions).

`environment("atari:ALE/Pong-v5")` (or `"atari:Pong"`, the same) makes the ALE env with
`frameskip=1` and wraps it:
- `AtariPreprocessing`: up to `noop_max` (30) no-ops at reset, `frame_skip` (4) frames
  per step with the max over the last two, 84x84 (`screen_size`) grey frames;
- `EpisodicLife` (`episodic_life`): a lost life ends the episode for the learner, while
  the game goes on (reset then steps a no-op instead of resetting the game);
- reward clipping to its sign (`clip_rewards`);
- `FrameStackObservation` of the last `frame_stack` (4) frames.
Observations are (4, 84, 84) uint8. Those keys go in `env_config`; any other key goes
to `gymnasium.make` (e.g. `repeat_action_probability`, `full_action_space`).

Episodic life and reward clipping are for training only: evaluation runners turn both
off (`EVALUATION_ENV_CONFIG`, under the user's own evaluation env_config), so evaluation
reports game scores, while the training episode returns are per life and clipped.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ftrl.wire.errors import ConfigError

PREFIX = "atari:"

#: ftrl's own env_config keys for Atari, with their defaults
DEFAULTS: dict[str, Any] = {
    "frame_skip": 4,
    "noop_max": 30,
    "screen_size": 84,
    "frame_stack": 4,
    "episodic_life": True,
    "clip_rewards": True,
}

#: what evaluation runners put under the user's evaluation env_config
EVALUATION_ENV_CONFIG: dict[str, Any] = {"episodic_life": False, "clip_rewards": False}


def atari_id(env: str) -> str | None:
    """The ALE id of an "atari:..." env ("atari:Pong" -> "ALE/Pong-v5"), else None."""
    if not env.startswith(PREFIX):
        return None
    name = env[len(PREFIX):]
    if not name:
        raise ConfigError(f'env {env!r} names no game: use e.g. "atari:ALE/Pong-v5"')
    return name if "/" in name else f"ALE/{name}-v5"


class EpisodicLife(gym.Wrapper):
    """A lost life is a terminal step; the game resets only when it is over."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self._ale_lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # a life was lost: go on from there with a no-op
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self._ale_lives()
        return obs, info


def _register_ale() -> None:
    try:
        import ale_py
    except ImportError:
        raise ConfigError(
            "Atari envs need ale-py (its wheel ships the ROMs): pip install 'ftrl[atari]'"
        ) from None
    gym.register_envs(ale_py)


def make_atari(env_id: str, env_config: dict | None = None) -> gym.Env:
    """The ALE env `env_id` with the standard wrappers (see the module docstring)."""
    config = {**DEFAULTS, **(env_config or {})}
    options = {k: config.pop(k) for k in DEFAULTS}
    if config.get("frameskip", 1) != 1:
        raise ConfigError("env_config frameskip: Atari envs skip frames in the wrappers; set frame_skip instead")
    config["frameskip"] = 1
    _register_ale()
    env = gym.make(env_id, **config)
    try:
        env = gym.wrappers.AtariPreprocessing(
            env, noop_max=int(options["noop_max"]), frame_skip=int(options["frame_skip"]),
            screen_size=int(options["screen_size"]), grayscale_obs=True, scale_obs=False,
        )
    except gym.error.DependencyNotInstalled as e:
        env.close()
        raise ConfigError(f"Atari preprocessing needs opencv: pip install 'ftrl[atari]' ({e})") from None
    if options["episodic_life"]:
        env = EpisodicLife(env)
    if options["clip_rewards"]:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    return gym.wrappers.FrameStackObservation(env, int(options["frame_stack"]))
