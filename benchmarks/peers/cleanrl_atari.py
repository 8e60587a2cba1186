"""CleanRL's `ppo_atari_envpool.py` on Pong beside `benchmarks/atari.py` (CPU only): env
frames trained per second and per CPU-second; or (`--what envs`) EnvPool's own stepping
speed. Prints ONE JSON line.

Run with a venv of its own (the script pins gym 0.23 and an envpool older than any wheel
for Python 3.11; envpool 1.2.5 is the oldest that installs here):

    python3 -m venv ~/.cache/ftrl-peers/cleanrl-venv
    ~/.cache/ftrl-peers/cleanrl-venv/bin/pip install torch==2.13.0
    ~/.cache/ftrl-peers/cleanrl-venv/bin/pip install envpool==1.2.5 gym==0.23.1 tyro tensorboard psutil
    ~/.cache/ftrl-peers/cleanrl-venv/bin/python benchmarks/peers/cleanrl_atari.py \\
        --script PATH/TO/cleanrl/ppo_atari_envpool.py --envs 8 --seconds 60

The script runs unmodified, in this process (runpy), as its users run it: its defaults
(Nature CNN, 128-step rollouts, 4 epochs of 4 minibatches, lr 2.5e-4 annealed) unless
`--epochs` says otherwise, `--no-cuda`. One shim: envpool 1.2.5 answers in gymnasium's
API (reset -> (obs, info), step -> 5 values) where the script expects gym 0.23's
(reset -> obs, step -> 4 values), so `envpool.make` is wrapped to answer in the old one
(done = terminated or truncated, as envpool < 0.7 did).

EnvPool's Pong (its defaults, as CleanRL makes it): Pong-v5, no sticky actions, up to
30 no-ops, frame skip 4 with max-pooling, episodic life, fire on reset, clipped rewards,
84x84 grey, stack of 4, 27,000 agent steps an episode at most.

Frames trained are counted at rollout boundaries (every step of the rollouts before had
been trained on), from the first boundary after the warm-up to the first `--seconds`
later; CPU seconds: this process and its threads (EnvPool steps in C++ threads here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import sys
import time

import numpy as np
import psutil

FRAME_SKIP = 4


def cpu_seconds() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


class Window:
    """Agent steps counted per env.step; the window opens at the first rollout boundary
    after the warm-up and closes at the first one `seconds` later (then the run ends)."""

    def __init__(self, warmup_s: float, seconds: float, rollout_steps: int):
        self.warmup_s, self.seconds, self.rollout_steps = warmup_s, seconds, rollout_steps
        self.start = time.perf_counter()
        self.steps = 0
        self.t0: float | None = None
        self.steps0 = 0
        self.cpu0 = 0.0
        self.result: dict | None = None
        self.atari: dict | None = None  # the env's Atari definition, once made

    def on_step(self, num_envs: int) -> None:
        if self.steps % (self.rollout_steps * num_envs) == 0:  # a rollout starts: the last one was trained
            now = time.perf_counter()
            if self.t0 is None and now - self.start >= self.warmup_s:
                self.t0, self.steps0, self.cpu0 = now, self.steps, cpu_seconds()
            elif self.t0 is not None and now - self.t0 >= self.seconds:
                wall, cpu = now - self.t0, cpu_seconds() - self.cpu0
                frames = FRAME_SKIP * (self.steps - self.steps0)
                self.result = {"window_s": round(wall, 1), "frames_trained": frames,
                               "frames_trained_per_s": round(frames / wall, 1),
                               "frames_trained_per_cpu_s": round(frames / cpu, 1), "cores_used": round(cpu / wall, 2)}
                raise _WindowDone
        self.steps += num_envs


class _WindowDone(Exception):
    pass


#: EnvPool's Atari settings that make up the Atari definition (`ftrl.rl.sampling.atari.definition`'s)
DEFINITION_KEYS = ("frame_skip", "noop_max", "img_height", "img_width", "gray_scale", "stack_num", "episodic_life",
                   "reward_clip", "use_fire_reset", "repeat_action_probability", "full_action_space",
                   "max_episode_steps", "use_inter_area_resize")


def envpool_definition(env) -> dict:
    """The Atari definition of an EnvPool env, as its own config says it."""
    config = env.spec.config
    return {"env": "Pong-v5 (envpool)", **{k: getattr(config, k) for k in DEFINITION_KEYS},
            "max_episode_steps_counts": "agent steps"}


class OldGymApi:
    """An envpool env answering in gym 0.23's API (what the script was written for)."""

    def __init__(self, env, window: Window, num_envs: int):
        self._env, self._window, self._n = env, window, num_envs

    def __getattr__(self, name):
        return getattr(self._env, name)

    @property
    def action_space(self):  # gym's spaces: the script asserts gym.spaces.Discrete
        import gym

        return gym.spaces.Discrete(int(self._env.action_space.n))

    @property
    def observation_space(self):
        import gym

        space = self._env.observation_space
        return gym.spaces.Box(0, 255, space.shape, np.uint8)

    def reset(self, **kwargs):
        return self._env.reset(**kwargs)[0]

    def step(self, action):
        self._window.on_step(self._n)
        obs, reward, terminated, truncated, info = self._env.step(action)
        return obs, reward, np.logical_or(terminated, truncated), info


def run_cleanrl(args: argparse.Namespace) -> dict:
    import envpool

    window = Window(args.warmup_seconds, args.seconds, rollout_steps=128)
    make = envpool.make

    def make_old_api(*a, **kw):
        env = make(*a, **kw)
        window.atari = envpool_definition(env)
        return OldGymApi(env, window, int(kw["num_envs"]))

    envpool.make = make_old_api
    sys.argv = [args.script, "--env-id", "Pong-v5", "--num-envs", str(args.envs), "--no-cuda",
                "--update-epochs", str(args.epochs), "--total-timesteps", "100000000"]
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # the script prints every episode: keep stdout for the JSON line
    os.chdir(os.path.dirname(os.path.abspath(args.script)))
    t_start = time.perf_counter()
    try:
        runpy.run_path(args.script, run_name="__main__")
    except _WindowDone:
        pass
    out = {"peer": "cleanrl ppo_atari_envpool.py", "env": "envpool 1.2.5 Pong-v5", "envs": args.envs,
           "num_steps": 128, "update_epochs": args.epochs, "num_minibatches": 4,
           "torch_threads": __import__("torch").get_num_threads(), "atari": window.atari,
           **(window.result or {"error": "no window"}),
           "wall_s": round(time.perf_counter() - t_start, 1)}
    os.dup2(real_stdout, 1)
    return out


def run_envs(args: argparse.Namespace) -> dict:
    """EnvPool stepping random actions, nothing else: env frames per second and per CPU-second."""
    import envpool

    env = envpool.make("Pong-v5", env_type="gymnasium", num_envs=args.envs, episodic_life=True,
                       reward_clip=True, seed=1, num_threads=args.threads)
    env.reset()
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 6, (1000, args.envs))
    for i in range(50):
        env.step(actions[i % 1000])
    t0, c0, steps = time.perf_counter(), cpu_seconds(), 0
    while time.perf_counter() - t0 < args.seconds:
        env.step(actions[steps % 1000])
        steps += 1
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    frames = FRAME_SKIP * steps * args.envs
    return {"peer": "envpool 1.2.5 (env only, random actions)", "atari": envpool_definition(env), "envs": args.envs,
            "num_threads": args.threads, "window_s": round(wall, 1), "frames_per_s": round(frames / wall, 1),
            "frames_per_cpu_s": round(frames / cpu, 1), "cores_used": round(cpu / wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=["train", "envs"], default="train")
    parser.add_argument("--script", default=os.path.expanduser("~/.cache/ftrl-peers/cleanrl/ppo_atari_envpool.py"))
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=4, help="update_epochs (the script's default 4)")
    parser.add_argument("--threads", type=int, default=0, help="envpool's num_threads (--what envs; 0: its default)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup-seconds", type=float, default=20.0)
    args = parser.parse_args()
    out = run_cleanrl(args) if args.what == "train" else run_envs(args)
    out["machine"] = {"cores": os.cpu_count(), "python": platform.python_version()}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
