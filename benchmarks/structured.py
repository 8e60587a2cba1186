"""What structured spaces cost the sampling loop: env steps per CPU second of one
EnvRunner (in this process, 8 sub-envs x 256-step fragments) on
- CartPole (a Box observation, the numpy policy): the reference;
- MaskedChoiceEnv with 2 heads (a Dict observation with an action mask, MultiDiscrete
  actions; the env's own Python is heavier than CartPole's): the numpy policy and the
  torch one (`inference_backend="torch"`);
- ImageVectorEnv (a Dict of a 12x12 uint8 image and a vector): the CNN-per-image model,
  which runs in torch.
Each arm alternates with the others in short chunks (the VM's drift falls on all alike);
beside the loop, the env alone (random actions through gymnasium) per CPU second, so the
runner's own share can be told from the env's.

    python benchmarks/structured.py [--rounds 10] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from common import emit, machine

ARMS = {
    "cartpole_numpy": ("CartPole-v1", {}, "numpy"),
    "masked_numpy": ("ftrl.testing.struct_envs:MaskedChoiceEnv", {"heads": 2}, "numpy"),
    "masked_torch": ("ftrl.testing.struct_envs:MaskedChoiceEnv", {"heads": 2}, "torch"),
    "image_vector_torch": ("ftrl.testing.struct_envs:ImageVectorEnv", {}, "torch"),
}


def make_runner(env: str, env_config: dict, backend: str) -> Any:
    import torch

    from ftrl.config import PPOConfig
    from ftrl.rl.sampling.env_runner import EnvRunner

    torch.set_num_threads(1)
    cfg = (PPOConfig().environment(env, env_config=env_config)
           .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=256, inference_backend=backend)
           .debugging(seed=0))
    return EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False)


def chunk(runner: Any, seconds: float) -> float:
    """Env steps per CPU second of `runner.sample()` for about `seconds`."""
    steps, cpu0, wall_end = 0, time.process_time(), time.monotonic() + seconds
    while time.monotonic() < wall_end:
        steps += runner.sample()["env_steps"]
    return steps / max(time.process_time() - cpu0, 1e-9)


def env_alone(env: str, env_config: dict, seconds: float) -> float:
    """Env steps per CPU second of the env itself, random actions."""
    from ftrl.rl.sampling.env_factory import make_env

    e = make_env(env, env_config)
    e.reset(seed=0)
    e.action_space.seed(0)
    steps, cpu0, wall_end = 0, time.process_time(), time.monotonic() + seconds
    while time.monotonic() < wall_end:
        action = e.action_space.sample()
        if env.endswith("MaskedChoiceEnv"):  # an allowed choice per head
            mask = e.unwrapped._mask.reshape(-1, e.unwrapped.n)
            action = mask.argmax(axis=1) if mask.shape[0] > 1 else int(mask[0].argmax())
        _, _, term, trunc, _ = e.step(action)
        steps += 1
        if term or trunc:
            e.reset()
    return steps / max(time.process_time() - cpu0, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=0.5)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    runners = {name: make_runner(*arm) for name, arm in ARMS.items()}
    for r in runners.values():
        r.sample()  # warm up: envs built, first reset
    rates: dict[str, list[float]] = {name: [] for name in ARMS}
    for _ in range(args.rounds):
        for name, r in runners.items():
            rates[name].append(chunk(r, args.seconds))
    for r in runners.values():
        r.stop()
    envs = {env.split(":")[-1]: env_alone(env, cfg, 2.0) for env, cfg, _ in ARMS.values()}
    loop = {name: round(statistics.median(v)) for name, v in rates.items()}
    emit({
        "benchmark": "structured_sampling",
        "machine": machine(),
        "shape": "1 EnvRunner in-process, 8 sub-envs x 256-step fragments, torch 1 thread",
        "env_steps_per_cpu_s": loop,
        "env_alone_steps_per_cpu_s": {k: round(v) for k, v in envs.items()},
        "torch_over_numpy_masked": round(loop["masked_torch"] / loop["masked_numpy"], 3),
        "rounds": args.rounds,
        "seconds_per_chunk": args.seconds,
    })


if __name__ == "__main__":
    main()
