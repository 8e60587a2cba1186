"""Tasks a memoryless policy cannot solve (import paths usable as `env`).

    ftrl.testing.memory_envs:RepeatFirstEnv       repeat the token shown at the first step
    ftrl.testing.memory_envs:StatelessCartPole    CartPole without its velocities (RLlib's
                                                   example of the same name)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class RepeatFirstEnv(gym.Env):
    """The first step shows a token (one of `num_tokens`, one-hot, and a cue flag 1); the
    later steps show zeros. From the second step on, reward 1 for the action equal to the
    token. `episode_len` steps: the best return is episode_len - 1; a policy without
    memory scores (episode_len - 1) / num_tokens. Config keys: num_tokens (2),
    episode_len (5)."""

    def __init__(self, config: dict):
        self.num_tokens = int(config.get("num_tokens", 2))
        self.episode_len = int(config.get("episode_len", 5))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.num_tokens + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(self.num_tokens)
        self._token = 0
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._token = int(self.np_random.integers(0, self.num_tokens))
        obs = np.zeros(self.num_tokens + 1, np.float32)
        obs[self._token] = 1.0
        obs[-1] = 1.0
        return obs, {}

    def step(self, action: Any):
        reward = float(self._t >= 1 and int(action) == self._token)
        self._t += 1
        return np.zeros(self.num_tokens + 1, np.float32), reward, self._t >= self.episode_len, False, {}


class StatelessCartPole(gym.Wrapper):
    """CartPole-v1 observing only the cart's position and the pole's angle (no
    velocities): a policy must remember to tell where things are going."""

    def __init__(self, config: dict):
        super().__init__(gym.make("CartPole-v1"))
        high = np.array([4.8, 0.42], np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return obs[[0, 2]].astype(np.float32), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs[[0, 2]].astype(np.float32), reward, terminated, truncated, info
