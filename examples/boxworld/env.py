"""A BoxWorld-like relational gridworld (after Zambaldi et al. 2018, written for ftrl).

An N x N room holds the agent, one loose key and boxes. A box is a lock of one colour
holding a key of another colour (or the gem). The agent carries at most one key: it
picks a loose key up by stepping on it, and opens a box by stepping on its lock while
carrying the lock's colour; the key is spent and the box's content is the agent's new
key. The gem's box ends the episode, solved. The solution is a chain of
`solution_length` boxes from the loose key's colour to the gem; `num_distractors` boxes
hang off the chain: each takes a key of the chain and gives a colour that opens
nothing, so opening one is a dead end (the episode ends, unsolved). A lock the agent
cannot open is a wall. Rewards (BoxWorld's): +1 for each box of the chain, +10 for the
gem, -1 for a distractor.

Observation: float32 [N, N, C], per cell: agent, loose key colour (K), lock colour (K),
content colour (K), content gem, and the carried key's colour (K, the same on every cell).
Actions: up, down, left, right. `info["solved"]` is 1.0 on the step that takes the
gem, 0.0 on every other episode end. env_config: `size` (6), `solution_length` (2),
`num_distractors` (1), `num_colors` (6); the time limit is the job's `max_episode_steps`
(the seed's `horizon`). Built the RLlib way, `BoxWorld(env_context)`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


class BoxWorld(gym.Env):
    """The room (module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, config: dict) -> None:
        self.size = int(config.get("size", 6))
        self.solution_length = int(config.get("solution_length", 2))
        self.num_distractors = int(config.get("num_distractors", 1))
        self.num_colors = int(config.get("num_colors", 6))
        cells = self.size * self.size
        if self.solution_length < 1 or self.num_distractors < 0:
            raise ValueError("solution_length must be >= 1 and num_distractors >= 0")
        if self.solution_length + self.num_distractors + 1 > self.num_colors:
            raise ValueError(f"{self.solution_length} chain and {self.num_distractors} distractor boxes need more "
                             f"than num_colors={self.num_colors} colours")
        if self.solution_length + self.num_distractors + 2 > cells:
            raise ValueError(f"a {self.size}x{self.size} room is too small for the boxes")
        k = self.num_colors
        self.channels = 1 + 3 * k + 1 + k
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.size, self.size, self.channels), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.locks: dict[tuple[int, int], tuple[int, int]] = {}  # cell -> (lock colour, content; -1 = gem)
        self.distractors: set[tuple[int, int]] = set()
        self.loose: dict[tuple[int, int], int] = {}
        self.agent = (0, 0)
        self.held = -1

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        rng = self.np_random
        colors = [int(c) for c in rng.permutation(self.num_colors)]
        chain = colors[: self.solution_length + 1]  # chain[0]: the loose key; box i: lock chain[i] -> chain[i+1]
        spare = colors[self.solution_length + 1:]
        n_boxes = self.solution_length + self.num_distractors
        cells = [(int(i) // self.size, int(i) % self.size) for i in rng.permutation(self.size * self.size)]
        self.agent, loose_cell, box_cells = cells[0], cells[1], cells[2:2 + n_boxes]
        self.loose = {loose_cell: chain[0]}
        self.locks, self.distractors = {}, set()
        for i in range(self.solution_length):
            content = chain[i + 1] if i + 1 < self.solution_length else -1
            self.locks[box_cells[i]] = (chain[i], content)
        for j in range(self.num_distractors):
            cell = box_cells[self.solution_length + j]
            self.locks[cell] = (chain[int(rng.integers(self.solution_length))], spare[j])
            self.distractors.add(cell)
        self.held = -1
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        dr, dc = MOVES[int(action)]
        r, c = self.agent[0] + dr, self.agent[1] + dc
        if not (0 <= r < self.size and 0 <= c < self.size):
            return self._obs(), 0.0, False, False, {}
        cell = (r, c)
        reward, done, info = 0.0, False, {}
        if cell in self.locks:
            color, content = self.locks[cell]
            if self.held != color:
                return self._obs(), 0.0, False, False, {}  # a lock it cannot open is a wall
            del self.locks[cell]
            self.held = content
            if cell in self.distractors:
                reward, done, info = -1.0, True, {"solved": 0.0}
            elif content == -1:
                reward, done, info = 10.0, True, {"solved": 1.0}
            else:
                reward = 1.0
        elif cell in self.loose:
            self.held = self.loose.pop(cell)
        self.agent = cell
        return self._obs(), reward, done, False, info

    def _obs(self) -> np.ndarray:
        k = self.num_colors
        obs = np.zeros((self.size, self.size, self.channels), np.float32)
        obs[self.agent[0], self.agent[1], 0] = 1.0
        for (r, c), color in self.loose.items():
            obs[r, c, 1 + color] = 1.0
        for (r, c), (color, content) in self.locks.items():
            obs[r, c, 1 + k + color] = 1.0
            if content >= 0:
                obs[r, c, 1 + 2 * k + content] = 1.0
            else:
                obs[r, c, 1 + 3 * k] = 1.0
        if self.held >= 0:
            obs[:, :, 2 + 3 * k + self.held] = 1.0
        return obs
