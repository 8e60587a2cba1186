"""Misbehaving environments for tests and chaos runs (import paths usable as `env`).

    ftrl.testing.envs:make_flaky_env    CartPole that fails every `fail_every` steps
    ftrl.testing.envs:make_slow_env     CartPole that sleeps `sleep_s` per step
    ftrl.testing.envs:make_broken_env   raises while being constructed
    ftrl.testing.envs:make_text_env     has a Text observation space (unsupported)
    ftrl.testing.envs:make_counter_env  deterministic: obs = step count, reward 1,
                                           episode of `episode_len` steps (terminates)
    ftrl.testing.envs:make_hang_env     CartPole whose `step` hangs after `hang_after`
                                           steps, or whose construction hangs
                                           (once per `marker` file)
    ftrl.testing.envs:make_paced_env    CartPole whose every `step` waits for one byte
                                           on the FIFO at `fifo` (a test paces the steps)
    ftrl.testing.envs:make_pixel_env    uint8 images (36x36x3) of a moving dot, Discrete(3):
                                           reward 1 for the action that matches the dot's
                                           row third, `episode_len` steps (default 20);
                                           renders its frames (render_mode="rgb_array")
    ftrl.testing.envs:make_info_env     CartPole whose info holds `pole_angle` (|angle|,
                                           radians), `pid`, `flags` (a numpy array) and
                                           `handle` (an object no process boundary takes)
    ftrl.testing.envs:ContextEnv        an RLlib-style class, `ContextEnv(config)`: obs =
                                           [worker_index, vector_index, num_workers, remote,
                                           t] of its EnvContext, reward 1, never ends by
                                           itself (`max_episode_steps` cuts it), unless
                                           `episode_len` is given

`make_flaky_env` env_config keys: `fail_every` (default 50), `scope` ("instance": count
this instance's calls, the default; "process": count the calls of every flaky env in
the process, so only one sub-env of a runner fails at a time), `mode` ("raise" |
"exit" | "segfault" | "nan_obs" | "nan_reward"), `fail_in` ("step" | "reset"),
`max_episode_steps` (default 500).

`make_hang_env` env_config keys: `hang_in` ("step", the default, or "make": the
constructor hangs; with `only_in_actors` true only in an actor process, so a driver that
builds one env to read its spaces does not), `hang_after` (default 20: the step call that hangs),
`mode` ("sleep": blocks in time.sleep, the GIL released; "spin": a Python busy loop),
`hang_s` (default 3600: how long the hang lasts), `marker` (a file path: the first env
to hang creates it, holding its pid, and no env hangs while it exists, so only the first
process of a run hangs and a restarted runner works; without it every instance hangs).
"""

from __future__ import annotations

import ctypes
import os
import select
import time
from typing import Any

import gymnasium as gym
import numpy as np

_PROCESS_CALLS = [0]


class FlakyEnv(gym.Wrapper):
    """Fails on every `fail_every`-th call of `fail_in` (per instance or per process)."""

    def __init__(
        self, env: gym.Env, fail_every: int = 50, mode: str = "raise", fail_in: str = "step", scope: str = "instance"
    ):
        super().__init__(env)
        if scope not in ("instance", "process"):
            raise ValueError(f"unknown scope {scope!r}")
        self.scope = scope
        if mode not in ("raise", "exit", "segfault", "nan_obs", "nan_reward"):
            raise ValueError(f"unknown mode {mode!r}")
        if fail_in not in ("step", "reset"):
            raise ValueError(f"unknown fail_in {fail_in!r}")
        self.fail_every = fail_every
        self.mode = mode
        self.fail_in = fail_in
        self.calls = 0

    def _fail(self) -> bool:
        self.calls += 1
        _PROCESS_CALLS[0] += 1
        count = self.calls if self.scope == "instance" else _PROCESS_CALLS[0]
        if count % self.fail_every != 0:
            return False
        if self.mode == "raise":
            raise RuntimeError(f"flaky env failed on call {self.calls}")
        if self.mode == "exit":
            os._exit(13)
        if self.mode == "segfault":
            ctypes.string_at(0)
        return True

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        if self.fail_in == "reset" and self._fail() and self.mode == "nan_obs":
            obs = np.full_like(obs, np.nan)
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.fail_in == "step" and self._fail():
            if self.mode == "nan_obs":
                obs = np.full_like(obs, np.nan)
            elif self.mode == "nan_reward":
                reward = float("nan")
        return obs, reward, terminated, truncated, info


def make_flaky_env(config: dict) -> gym.Env:
    config = dict(config)
    base = gym.make("CartPole-v1", max_episode_steps=int(config.pop("max_episode_steps", 500)))
    return FlakyEnv(base, **config)


class SlowEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, sleep_s: float = 0.01):
        super().__init__(env)
        self.sleep_s = sleep_s

    def step(self, action: Any):
        time.sleep(self.sleep_s)
        return self.env.step(action)


def make_slow_env(config: dict) -> gym.Env:
    return SlowEnv(gym.make("CartPole-v1"), sleep_s=float(config.get("sleep_s", 0.01)))


class HangEnv(gym.Wrapper):
    """CartPole whose `hang_after`-th step call hangs for `hang_s` seconds (see module doc),
    or with mode="segfault" crashes its process there (inside the runner's vector step)."""

    def __init__(self, env: gym.Env, hang_after: int = 20, mode: str = "sleep", hang_s: float = 3600.0,
                 marker: str = ""):
        super().__init__(env)
        if mode not in ("sleep", "spin", "segfault"):
            raise ValueError(f"unknown mode {mode!r}")
        self.hang_after, self.mode, self.hang_s, self.marker = int(hang_after), mode, float(hang_s), marker
        self.calls = 0

    def step(self, action: Any):
        self.calls += 1
        if self.calls == self.hang_after and _claim(self.marker):
            _hang(self.mode, self.hang_s)
        return self.env.step(action)


def _claim(marker: str) -> bool:
    """True if this env is the one to hang (it created the marker, or there is none)."""
    if not marker:
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, str(os.getpid()).encode())  # which process hangs (for tests)
    finally:
        os.close(fd)
    return True


def _hang(mode: str, hang_s: float) -> None:
    if mode == "segfault":
        ctypes.string_at(0)
    if mode == "sleep":
        time.sleep(hang_s)
        return
    deadline = time.monotonic() + hang_s
    while time.monotonic() < deadline:  # holds the GIL between switch intervals
        pass


def make_hang_env(config: dict) -> gym.Env:
    config = dict(config)
    hang_in = config.pop("hang_in", "step")
    only_in_actors = bool(config.pop("only_in_actors", False))
    if hang_in not in ("step", "make"):
        raise ValueError(f"unknown hang_in {hang_in!r}")
    env = HangEnv(gym.make("CartPole-v1"), **config)
    if hang_in == "make":
        env.hang_after = 0  # its steps never hang
        if (not only_in_actors or _in_actor()) and _claim(env.marker):
            _hang(env.mode, env.hang_s)
    return env


def _in_actor() -> bool:
    from ftrl.client.context import get_runtime_context

    return get_runtime_context() is not None


class PacedEnv(gym.Wrapper):
    """CartPole whose every step first reads one byte from a FIFO (at most `wait_s`
    seconds, then it steps anyway): the writer decides when each step happens. While no
    writer holds the FIFO open, steps do not wait (the read end sees end-of-file)."""

    def __init__(self, env: gym.Env, fifo: str, wait_s: float = 60.0):
        super().__init__(env)
        self.wait_s = float(wait_s)
        self._fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def step(self, action: Any):
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        if poller.poll(int(self.wait_s * 1000)):
            os.read(self._fd, 1)
        return self.env.step(action)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()


def make_paced_env(config: dict) -> gym.Env:
    return PacedEnv(gym.make("CartPole-v1"), str(config["fifo"]), float(config.get("wait_s", 60.0)))


def make_broken_env(config: dict) -> gym.Env:
    raise RuntimeError("this environment cannot be built (on purpose)")


class TextObsEnv(gym.Env):
    """Observations of a space no model takes (Text)."""

    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any):
        return self.observation_space.sample(), 0.0, False, False, {}


def make_text_env(config: dict) -> gym.Env:
    return TextObsEnv()


class CounterEnv(gym.Env):
    """obs = [t], reward 1 per step, terminates after `episode_len` steps."""

    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Box(0.0, np.inf, (1,), np.float32)

    def __init__(self, episode_len: int = 5, truncate: bool = False):
        self.episode_len = episode_len
        self.truncate = truncate
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action: Any):
        self.t += 1
        done = self.t >= self.episode_len
        obs = np.array([float(self.t)], np.float32)
        return obs, 1.0, done and not self.truncate, done and self.truncate, {}


def make_counter_env(config: dict) -> gym.Env:
    return CounterEnv(int(config.get("episode_len", 5)), bool(config.get("truncate", False)))


class ContextEnv(gym.Env):
    """Built as RLlib builds an env class: `ContextEnv(config)`, config an EnvContext."""

    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Box(0.0, np.inf, (5,), np.float32)

    def __init__(self, config: Any):
        where = (config.worker_index, config.vector_index, config.num_workers, float(config.remote))
        self.where = np.array(where, np.float32)
        self.episode_len = config.get("episode_len")
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.append(self.where, np.float32(self.t))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any):
        self.t += 1
        return self._obs(), 1.0, self.episode_len is not None and self.t >= self.episode_len, False, {}


class InfoEnv(gym.Wrapper):
    """CartPole with an info worth a callback: |pole angle|, the process, a numpy array,
    and an object that cannot cross processes (sub-env processes drop it, counted)."""

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        info = {"pole_angle": abs(float(obs[2])), "pid": os.getpid(),
                "flags": np.array([terminated, truncated]), "handle": object()}
        return obs, reward, terminated, truncated, info


def make_info_env(config: dict) -> gym.Env:
    return InfoEnv(gym.make("CartPole-v1", max_episode_steps=int(config.get("max_episode_steps", 500))))


class PixelEnv(gym.Env):
    """A dot on a 36x36 RGB image (module docstring): small enough for tests of the CNN."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, episode_len: int = 20, render_mode: str | None = None):
        self.observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.episode_len = episode_len
        self.render_mode = render_mode
        self._rng = np.random.default_rng()
        self._t = 0
        self._pos = (0, 0)

    def _obs(self) -> np.ndarray:
        img = np.zeros((36, 36, 3), np.uint8)
        r, c = self._pos
        img[max(0, r - 2):r + 2, max(0, c - 2):c + 2] = (255, 128, 0)
        return img

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        self._pos = tuple(int(x) for x in self._rng.integers(0, 36, 2))
        return self._obs(), {}

    def step(self, action: Any) -> tuple:
        reward = 1.0 if int(action) == self._pos[0] // 12 else 0.0
        self._t += 1
        self._pos = tuple(int(x) for x in self._rng.integers(0, 36, 2))
        return self._obs(), reward, self._t >= self.episode_len, False, {}

    def render(self) -> np.ndarray:
        return self._obs()


def make_pixel_env(config: dict) -> gym.Env:
    return PixelEnv(int(config.get("episode_len", 20)), config.get("render_mode"))
