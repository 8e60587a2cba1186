"""Environments of structured spaces for tests and benchmarks (import paths usable as `env`).

    ftrl.testing.struct_envs:MaskedChoiceEnv   pick the marked choice among those an
                                                `action_mask` allows (RLlib's convention);
                                                raises on a masked action
    ftrl.testing.struct_envs:MixedActionEnv    a Tuple action of a Discrete and a Box part
    ftrl.testing.struct_envs:ImageVectorEnv    a Dict of a uint8 image and a vector, both
                                                needed to act right
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class MaskedActionError(RuntimeError):
    """The env was given an action its mask forbids."""


class MaskedChoiceEnv(gym.Env):
    """Each step marks one target among `num_choices` and allows a random subset (at least
    two, the target among them) in `action_mask`; reward 1 per head that picks its target.

    Observation: Dict {"observations": {"target": Box one-hot of each head's target,
    "step": Discrete(episode_len)}, "action_mask": Box 0/1 of every head's choices}.
    Action: Discrete(num_choices), or MultiDiscrete([num_choices] * heads) with heads > 1.
    A masked action raises MaskedActionError (a sampler that lets one through fails the
    sub-env). `misfit_at` (a step index, -1: never): that step's observation lacks its
    "target" part (a structured observation that does not fit). Config keys: num_choices
    (5), heads (1), episode_len (20), misfit_at (-1).
    """

    def __init__(self, config: dict):
        config = dict(config or {})
        self.n = int(config.get("num_choices", 5))
        self.heads = int(config.get("heads", 1))
        self.episode_len = int(config.get("episode_len", 20))
        self.misfit_at = int(config.get("misfit_at", -1))
        self.observation_space = gym.spaces.Dict({
            "observations": gym.spaces.Dict({
                "target": gym.spaces.Box(0.0, 1.0, (self.heads * self.n,), np.float32),
                "step": gym.spaces.Discrete(self.episode_len),
            }),
            "action_mask": gym.spaces.Box(0.0, 1.0, (self.heads * self.n,), np.float32),
        })
        self.action_space = (gym.spaces.Discrete(self.n) if self.heads == 1
                             else gym.spaces.MultiDiscrete([self.n] * self.heads))
        self._t = 0
        self._targets = np.zeros(self.heads, np.int64)
        self._mask = np.ones(self.heads * self.n, np.float32)

    def _observe(self) -> dict[str, Any]:
        rng = self.np_random
        self._targets = rng.integers(0, self.n, self.heads)
        target = np.zeros(self.heads * self.n, np.float32)
        self._mask = np.zeros(self.heads * self.n, np.float32)
        for h, k in enumerate(self._targets):
            allowed = rng.random(self.n) < 0.5
            allowed[k] = True
            allowed[(k + 1 + rng.integers(0, self.n - 1)) % self.n] = True  # at least two
            self._mask[h * self.n: (h + 1) * self.n] = allowed
            target[h * self.n + k] = 1.0
        inner: dict[str, Any] = {"target": target, "step": self._t}
        if self._t == self.misfit_at:
            del inner["target"]
        return {"observations": inner, "action_mask": self._mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any):
        picks = np.atleast_1d(np.asarray(action, np.int64))
        reward = 0.0
        for h, k in enumerate(picks):
            if not 0 <= k < self.n or self._mask[h * self.n + k] == 0:
                raise MaskedActionError(f"head {h} took masked action {int(k)} (mask {self._mask.tolist()})")
            reward += float(k == self._targets[h])
        self._t += 1
        done = self._t >= self.episode_len
        return self._observe() if not done else self._final(), reward, done, False, {}

    def _final(self) -> dict[str, Any]:
        self._t = self.episode_len - 1  # the last observation, in range
        return self._observe()


class MixedActionEnv(gym.Env):
    """Observation x ~ U(-1, 1) (a Box of one); action Tuple(Discrete(2), Box(-1, 1, (1,))):
    reward 1 when the discrete part says whether x > 0, minus |box - x|. Episodes of
    `episode_len` (10) steps."""

    def __init__(self, config: dict):
        self.episode_len = int((config or {}).get("episode_len", 10))
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)))
        self._x = 0.0
        self._t = 0

    def _observe(self) -> np.ndarray:
        self._x = float(self.np_random.uniform(-1.0, 1.0))
        return np.array([self._x], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any):
        side, value = action
        if not self.action_space.contains((int(side), np.asarray(value, np.float32).reshape(1))):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        reward = float(int(side) == int(self._x > 0)) - abs(float(np.asarray(value).reshape(-1)[0]) - self._x)
        self._t += 1
        return self._observe(), reward, self._t >= self.episode_len, False, {}


class ImageVectorEnv(gym.Env):
    """Observation Dict {"image": uint8 (size, size, 1), a bright square in its left or
    right half; "sign": Box of one, -1 or +1}; action Discrete(2). The right action is
    the square's side (0 left, 1 right), swapped when the sign is -1: reward 1 for it. A
    policy that sees one part alone scores 0.5 a step. Episodes of `episode_len` (10)
    steps. Config keys: size (12), episode_len (10)."""

    def __init__(self, config: dict):
        self.size = int(config.get("size", 12))
        self.episode_len = int(config.get("episode_len", 10))
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0, 255, (self.size, self.size, 1), np.uint8),
            "sign": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
        })
        self.action_space = gym.spaces.Discrete(2)
        self._right = 0
        self._t = 0

    def _observe(self) -> dict[str, Any]:
        rng = self.np_random
        side = int(rng.integers(0, 2))
        sign = 1.0 if rng.random() < 0.5 else -1.0
        self._right = side if sign > 0 else 1 - side
        image = np.zeros((self.size, self.size, 1), np.uint8)
        half = self.size // 2
        row = int(rng.integers(0, self.size - 2))
        col = int(rng.integers(0, half - 2)) + (half if side else 0)
        image[row: row + 3, col: col + 3] = 255
        return {"image": image, "sign": np.array([sign], np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any):
        reward = float(int(action) == self._right)
        self._t += 1
        return self._observe(), reward, self._t >= self.episode_len, False, {}
