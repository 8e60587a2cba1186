"""Recurrent policies (`use_lstm`): learning a task that needs memory, and what an LSTM
costs the sampling loop.

`--what learn`: PPO+LSTM or APPO+LSTM on StatelessCartPole (CartPole without its
velocities, `ftrl.testing.memory_envs`), env steps and wall time until the 100-episode
mean return reaches `--target` (350, the return RLlib's own example asks for within 2M
steps), one run per seed, learner and sampling in this process (8 sub-envs).

`--what sample`: env steps per CPU second of one EnvRunner in this process on
StatelessCartPole with the LSTM policy (torch, one thread) against the MLP (numpy), at
8 and 16 sub-envs x 64-step fragments, alternating short chunks; then 1x8 and 2x8
runner processes x sub-envs sampling at once (env steps per second and per CPU second).

    python benchmarks/memory.py --what learn --algo PPO --seeds 0 1 2 [--max-steps 2000000] [--max-minutes 30]
    python benchmarks/memory.py --what sample
    python benchmarks/memory.py --what update    # seconds of one PPO+LSTM learner update
    python benchmarks/memory.py --what plot      # results/memory_learning.png from the JSON files
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from common import emit, machine

ENV = "ftrl.testing.memory_envs:StatelessCartPole"
#: the sampling comparison's model (small: what the runner's loop costs shows)
LSTM = {"use_lstm": True, "lstm_cell_size": 64, "fcnet_hiddens": [64], "max_seq_len": 16, "vf_share_layers": True}
#: the learning runs': RLlib's example's model (its DefaultModelConfig: cell 256, fc [256, 256])
LEARN_LSTM = {"use_lstm": True, "lstm_cell_size": 256, "fcnet_hiddens": [256, 256], "max_seq_len": 50,
              "vf_share_layers": True}


def config(algo: str, seed: int) -> Any:
    """RLlib's examples' hyperparameters (rllib/tuned_examples/{ppo,appo}/stateless_cartpole_*.py)
    and their algorithms' defaults. PPO: lr 3e-4, vf_loss_coeff 0.05, 6 epochs of 128-step
    minibatches of 4000-step batches, lambda 1.0, clip 0.3, no grad clip, vf_clip_param 10,
    the KL term (kl_coeff 0.2, kl_target 0.01), no entropy bonus. APPO: lr 5e-4, 6 epochs,
    vf_loss_coeff 0.05, grad_clip 20, 500-step batches, entropy_coeff 0.01, clip 0.4."""
    from ftrl.config import APPOConfig, PPOConfig

    if algo == "PPO":
        cfg = PPOConfig().training(train_batch_size=4000, minibatch_size=128, num_epochs=6, lambda_=1.0,
                                   clip_param=0.3, vf_clip_param=10.0, use_kl_loss=True, kl_coeff=0.2,
                                   kl_target=0.01, lr=3e-4, entropy_coeff=0.0, grad_clip=None)
    else:
        cfg = APPOConfig().training(train_batch_size=500, minibatch_size=500, num_epochs=6, lr=5e-4,
                                    entropy_coeff=0.01, grad_clip=20.0, clip_param=0.4)
    return (cfg.environment(ENV)
            .env_runners(num_env_runners=0, num_envs_per_env_runner=8, rollout_fragment_length=50,
                         observation_filter="MeanStdFilter")
            .training(gamma=0.99, vf_loss_coeff=0.05, model=LEARN_LSTM)
            .debugging(seed=seed))


def learn(algo: str, seed: int, target: float, max_steps: int, max_minutes: float) -> dict[str, Any]:
    run = config(algo, seed).build()
    start = time.monotonic()
    curve: list[tuple[int, float]] = []
    steps, ret, reached = 0, None, False
    try:
        while steps < max_steps and time.monotonic() - start < 60 * max_minutes:
            r = run.train()
            steps, ret = int(r["env_steps_sampled"]), r["episode_return_mean"]
            if ret is not None:
                curve.append((steps, round(float(ret), 1)))
                if ret >= target:
                    reached = True
                    break
    finally:
        run.stop()
    return {"seed": seed, "reached": reached, "env_steps": steps, "wall_s": round(time.monotonic() - start, 1),
            "final_return": ret, "curve": curve[:: max(1, len(curve) // 40)]}


def sample_rates(rounds: int, seconds: float) -> dict[str, Any]:
    import torch

    from ftrl.config import PPOConfig
    from ftrl.rl.sampling.env_runner import EnvRunner

    torch.set_num_threads(1)
    runners = {}
    for envs in (8, 16):
        for name, model in (("mlp", {"fcnet_hiddens": [64]}), ("lstm", LSTM)):
            cfg = (PPOConfig().environment(ENV).env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=64)
                   .training(model=model).debugging(seed=0))
            runners[f"{name}_1x{envs}"] = EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False)
    rates: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for name, r in runners.items():
            steps, cpu0, end = 0, time.process_time(), time.monotonic() + seconds
            while time.monotonic() < end:
                steps += r.sample()["env_steps"]
            rates[name].append(steps / max(time.process_time() - cpu0, 1e-9))
    for r in runners.values():
        r.stop()
    return {k: round(statistics.median(v)) for k, v in rates.items()}


def _runner_process(model: dict[str, Any], envs: int, seconds: float) -> tuple[int, float]:
    """One EnvRunner sampling for `seconds` (after a warm-up fragment): (env steps, CPU s)."""
    import torch

    from ftrl.config import PPOConfig
    from ftrl.rl.sampling.env_runner import EnvRunner

    torch.set_num_threads(1)
    cfg = (PPOConfig().environment(ENV).env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=64)
           .training(model=model).debugging(seed=0))
    runner = EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False)
    try:
        runner.sample()
        steps, cpu0, end = 0, time.process_time(), time.monotonic() + seconds
        while time.monotonic() < end:
            steps += runner.sample()["env_steps"]
        return steps, time.process_time() - cpu0
    finally:
        runner.stop()


def parallel_rates(runners: int, envs: int, seconds: float) -> dict[str, Any]:
    """`runners` runner processes x `envs` sub-envs sampling at once, MLP then LSTM: env
    steps per wall second (all runners) and per CPU second of the runners."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    out = {}
    for name, model in (("mlp", {"fcnet_hiddens": [64]}), ("lstm", LSTM)):
        start = time.monotonic()
        with ProcessPoolExecutor(runners, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_runner_process, [model] * runners, [envs] * runners, [seconds] * runners))
        steps, cpu = sum(r[0] for r in results), sum(r[1] for r in results)
        out[f"{name}_{runners}x{envs}"] = {"env_steps_per_s": round(steps / seconds),
                                          "env_steps_per_cpu_s": round(steps / max(cpu, 1e-9)),
                                          "wall_s_with_startup": round(time.monotonic() - start, 1)}
    return out


def update_time(rounds: int) -> dict[str, Any]:
    """Seconds of one PPO+LSTM learner update (the learning settings: 4000 steps, 6 epochs
    of 128-step minibatches, cell 256) on one thread, on a fragment of 8 x 500 steps."""
    import torch

    from ftrl.rl.algorithms.ppo import PPOLearner
    from ftrl.rl.sampling.env_runner import EnvRunner

    torch.set_num_threads(1)
    cfg = config("PPO", 0).env_runners(rollout_fragment_length=500)
    runner = EnvRunner(cfg.to_dict(), set_torch_threads=False)
    try:
        fragment = runner.sample()["batch"]
    finally:
        runner.stop()
    learner = PPOLearner(cfg, runner.spec)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        out = learner.update([fragment], 0)
        times.append(time.perf_counter() - start)
    return {"benchmark": "memory_update", "machine": machine(), "env_steps": 4000, "sgd_steps": out["num_sgd_steps"],
            "update_s": [round(t, 2) for t in times], "median_s": round(statistics.median(times), 2)}


def plot(results: Path, png: Path) -> dict[str, Any]:
    """The learning curves of `results/memory_ppo.json`, `memory_ppo_nofilter.json`,
    `memory_appo.json` and RLlib's (`rllib_stateless_cartpole.json`) in one PNG: the
    100-episode mean return over env steps, the 350 target dashed."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    drawn = []
    for name, label, style in (("memory_ppo.json", "ftrl PPO+LSTM", "-"),
                               ("memory_ppo_nofilter.json", "ftrl PPO+LSTM, NoFilter", ":"),
                               ("memory_appo.json", "ftrl APPO+LSTM", "--")):
        path = results / name
        if not path.exists():
            continue
        for run in json.loads(path.read_text())["runs"]:
            steps, returns = zip(*run["curve"], strict=True) if run["curve"] else ((), ())
            ax.plot(steps, returns, style, label=f"{label}, seed {run['seed']}")
            drawn.append(f"{name}:{run['seed']}")
    peer = results / "rllib_stateless_cartpole.json"
    if peer.exists():
        rllib = json.loads(peer.read_text())
        steps, returns = zip(*rllib["curve"], strict=True)
        ax.plot(steps, returns, "k-", linewidth=2.5, label=f"RLlib {rllib['ray']} PPO+LSTM, seed {rllib['seed']}")
        drawn.append("rllib")
    ax.axhline(350, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean return (100 episodes)")
    ax.set_title("StatelessCartPole with an LSTM, RLlib's examples' settings (2 cores)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return {"benchmark": "memory_plot", "png": str(png), "curves": drawn}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("learn", "sample", "update", "plot"), default="learn")
    ap.add_argument("--algo", choices=("PPO", "APPO"), default="PPO")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=350.0)
    ap.add_argument("--max-steps", type=int, default=2_000_000)
    ap.add_argument("--max-minutes", type=float, default=30.0, help="per seed")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    if args.what == "update":
        emit(update_time(args.rounds))
        return
    if args.what == "plot":
        results = Path(__file__).resolve().parent / "results"
        emit(plot(results, results / "memory_learning.png"))
        return
    if args.what == "sample":
        rates = sample_rates(args.rounds, args.seconds)
        shapes = {**parallel_rates(1, 8, 6 * args.seconds), **parallel_rates(2, 8, 6 * args.seconds)}
        emit({"benchmark": "memory_sampling", "machine": machine(), "env": ENV,
              "env_steps_per_cpu_s": rates,
              "lstm_over_mlp": {n: round(rates[f"lstm_1x{n}"] / rates[f"mlp_1x{n}"], 3) for n in (8, 16)},
              "runner_processes": shapes,
              "lstm_over_mlp_per_s": {s: round(shapes[f"lstm_{s}"]["env_steps_per_s"]
                                               / shapes[f"mlp_{s}"]["env_steps_per_s"], 3) for s in ("1x8", "2x8")}})
        return
    runs = [learn(args.algo, seed, args.target, args.max_steps, args.max_minutes) for seed in args.seeds]
    emit({"benchmark": "memory_learning", "machine": machine(), "env": ENV, "algo": args.algo, "model": LEARN_LSTM,
          "target": args.target, "max_steps": args.max_steps, "max_minutes": args.max_minutes, "runs": runs})


if __name__ == "__main__":
    main()
