"""Atari through ale-py (`pip install 'ftrl[atari]'`; its wheel ships the ROMs) with the
standard wrappers (Mnih et al. 2015; Machado et al. 2018 for v5's sticky actions).

`environment("atari:ALE/Pong-v5")` (or `"atari:Pong"`, the same) makes the ALE env with
`frameskip=1` and wraps it:
- `AtariPreprocessing`: up to `noop_max` (30) no-ops at reset, `frame_skip` (4) frames
  per step with the max over the last two, 84x84 (`screen_size`) grey frames;
- `GameStats`: the real game's return (unclipped) and length over all its lives, which
  the runner attaches to the episode that ends with the game (`take_game`);
- `EpisodicLife` (`episodic_life`): a lost life ends the episode for the learner, while
  the game goes on (reset then steps a no-op instead of resetting the game);
- `FireOnReset` (`fire_reset`): FIRE, then action 2, after every reset (a new game or a
  lost life), for games whose action 1 is FIRE (`None`, the default: those; True/False
  forces it): Breakout does not start without it;
- reward clipping to its sign (`clip_rewards`);
- `FrameStackObservation` of the last `frame_stack` (4) frames.
Observations are (4, 84, 84) uint8. Those keys go in `env_config`; any other key goes
to `gymnasium.make` (e.g. `repeat_action_probability`, `full_action_space`).
`definition(env_id, env_config)` is the whole recipe as one dict (what every Atari
benchmark writes into its JSON, for ftrl's runs and the peers' alike).

Episodic life and reward clipping are for training only: evaluation runners turn both
off (`EVALUATION_ENV_CONFIG`, under the user's own evaluation env_config), so evaluation
reports game scores, while the training episode returns are per life and clipped.
"""

from __future__ import annotations

import math
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
    "fire_reset": None,
}
#: ALE v5's own settings the recipe keeps (what `definition` reports beside DEFAULTS)
ALE_V5 = {"repeat_action_probability": 0.25, "full_action_space": False, "max_num_frames_per_episode": 108_000}

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


class GameStats(gym.Wrapper):
    """Counts the real game's return and agent steps from its reset to its end (below
    episodic life and reward clipping); `take_game()` hands over a finished one once."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._return = 0.0
        self._length = 0
        self._finished: tuple[float, int] | None = None

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        self._length += 1
        if terminated or truncated:
            self._finished = (self._return, self._length)
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self._return, self._length = 0.0, 0
        return self.env.reset(**kwargs)

    def take_game(self) -> tuple[float, int] | None:
        """(return, length) of the game that ended since the last take, else None."""
        finished, self._finished = self._finished, None
        return finished


class FireOnReset(gym.Wrapper):
    """After every reset, FIRE (action 1) then action 2, as the standard wrappers do."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def needs_fire(env: gym.Env) -> bool:
    """Whether the game's action 1 is FIRE (with at least 3 actions): it waits for it."""
    meanings = env.unwrapped.get_action_meanings()
    return len(meanings) >= 3 and meanings[1] == "FIRE"


def game_stats(env: gym.Env) -> GameStats | None:
    """The `GameStats` wrapper inside `env` (an Atari env of `make_atari`), else None."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, GameStats):
            return env
        env = env.env
    return None


class GameScores:
    """A runner's record of real games: per episode it records, the game's return and
    length where a game ended with that episode, NaN elsewhere (a lost life); they reach
    the training rows as the custom metrics `game_return` and `game_length`
    (`custom_metrics["game_return_mean"]`: the game score)."""

    def __init__(self) -> None:
        self._returns: list[float] = []
        self._lengths: list[float] = []

    def episode_recorded(self, env: gym.Env) -> None:
        """An episode of in-process sub-env `env` was recorded: note its game, if it ended."""
        stats = game_stats(env)
        game = stats.take_game() if stats is not None else None
        self._returns.append(game[0] if game else math.nan)
        self._lengths.append(float(game[1]) if game else math.nan)

    def take(self) -> dict[str, np.ndarray]:
        """The columns since the last take, one value per recorded episode."""
        out = {"game_return": np.asarray(self._returns, np.float64),
               "game_length": np.asarray(self._lengths, np.float64)}
        self._returns, self._lengths = [], []
        return out


def definition(env_id: str, env_config: dict | None = None) -> dict[str, Any]:
    """The Atari recipe in full (ALE v5's settings, the wrappers' keys, what counts as
    the score), as an Atari benchmark writes it into its JSON."""
    config = {**DEFAULTS, **ALE_V5, **(env_config or {})}
    return {"env": atari_id(env_id) or env_id, **config, "frame_max_pool": "max of the last 2 frames",
            "observation": f"{config['screen_size']}x{config['screen_size']} grey, stack of {config['frame_stack']}",
            "score": "the game's return over all lives, unclipped (evaluation, and GameStats in training)"}


def _register_ale() -> None:
    try:
        import ale_py
    except ImportError:
        raise ConfigError(
            "Atari envs need ale-py (its wheel ships the ROMs): pip install 'ftrl[atari]'"
        ) from None
    gym.register_envs(ale_py)


def make_atari(env_id: str, env_config: dict | None = None, max_episode_steps: int | None = None) -> gym.Env:
    """The ALE env `env_id` with the standard wrappers (see the module docstring);
    `max_episode_steps`: agent steps a game at most, below episodic life (a cut game is
    over, so the next reset starts a new one, not the next life)."""
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
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, int(max_episode_steps))
    env = GameStats(env)
    if options["episodic_life"]:
        env = EpisodicLife(env)
    fire = options["fire_reset"]
    if fire not in (None, True, False):
        env.close()
        raise ConfigError(f"env_config fire_reset must be true, false or null (auto), got {fire!r}")
    if fire or (fire is None and needs_fire(env)):
        env = FireOnReset(env)
    if options["clip_rewards"]:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    return gym.wrappers.FrameStackObservation(env, int(options["frame_stack"]))
