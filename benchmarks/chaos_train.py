"""PPO (or the algorithm of `--config`, e.g. examples/cartpole_appo.toml) on CartPole-v1 with 2 env runners on the embedded local cluster, calm and with an
env runner SIGKILLed every `--kill-every` seconds; reports the slowdown. Prints ONE JSON.

    python benchmarks/chaos_train.py [--kill-every 1 3] [--seed 0] [--target 475] [--steps 200000]

Two measures per kill interval:
- `to_target`: wall time until the 100-episode mean return reaches `--target`. Learning
  itself changes under chaos (a killed runner's unfinished episodes are lost, the
  batches differ), so this mixes runtime cost with learning noise.
- `long_run`: wall time for a fixed `--steps` env steps (no reward stop): the runtime's
  own cost of the kills over a long run (at one kill per second a 200k-step run sees
  ~40 kills; a node failure count that never decays would exclude the only node).

Target (issue 10): chaos wall time under 1.3x the calm run's at one kill per second.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ftrl.client.cluster import LocalCluster  # noqa: E402
from ftrl.config import StopCriteria, load_job  # noqa: E402


def runner_pids(client, job: str) -> dict[str, int]:
    return {a["name"]: a["pid"] for a in client.actors() if a["name"].startswith(f"{job}/env_runner/") and a["state"] == "ALIVE" and a["pid"]}


def run(client, job: str, seed: int, target: float, kill_every: float | None, max_steps: int = 300_000,
        job_file: Path = REPO / "examples" / "cartpole_ppo.toml") -> dict:
    config = load_job(job_file).config
    config.env_runners(num_env_runners=2).debugging(seed=seed)
    t0 = time.monotonic()
    algo = config.build(client=client, job_name=job)
    stop = threading.Event()
    kills = []

    def killer() -> None:
        i = 0
        while not stop.wait(kill_every):
            name = f"{job}/env_runner/{i % 2}"
            i += 1
            pid = runner_pids(client, job).get(name)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills.append(time.monotonic() - t0)
                except ProcessLookupError:
                    pass

    thread = threading.Thread(target=killer, daemon=True)
    if kill_every:
        thread.start()
    healthy = []
    try:
        summary = algo.run(StopCriteria(stop_reward=target, stop_timesteps=max_steps),
                           on_result=lambda r: healthy.append(r["num_healthy_env_runners"]))
    finally:
        stop.set()
        algo.stop()
    wall = time.monotonic() - t0
    r = summary["result"]
    return {
        "stop_reason": summary["stop_reason"],
        "wall_s": round(wall, 2),
        "env_steps": r["env_steps_sampled"],
        "iterations": r["iteration"],
        "kills": len(kills),
        "num_env_runner_restarts": r["num_env_runner_restarts"],
        "num_env_runner_failures": r["num_env_runner_failures"],
        "num_samples_lost": r["num_samples_lost"],
        "num_samples_dropped": r["num_samples_dropped"],
        "num_samples_late": r["num_samples_late"],
        "mean_healthy_runners": round(sum(healthy) / max(1, len(healthy)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kill-every", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--steps", type=int, default=200_000, help="env steps of the long runs")
    parser.add_argument("--spares", type=int, default=2, help="warm spare processes of the worker")
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "cartpole_ppo.toml",
                        help="the job file (examples/cartpole_appo.toml: APPO)")
    args = parser.parse_args()
    env = {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out: dict = {"to_target": {}, "long_run": {}}
    with LocalCluster(workers=1, slots=2, spares=args.spares, preload="ftrl.rl.sampling.env_runner", env=env) as cluster:
        client = cluster.client()
        calm = run(client, "calm", args.seed, args.target, None, job_file=args.config)
        out["to_target"]["calm"] = calm
        for every in args.kill_every:
            chaos = run(client, f"chaos{every:g}", args.seed, args.target, every, job_file=args.config)
            out["to_target"][f"kill_every_{every:g}s"] = {**chaos, "slowdown": round(chaos["wall_s"] / calm["wall_s"], 3)}
        calm_long = run(client, "calmlong", args.seed, float("inf"), None, args.steps, job_file=args.config)
        out["long_run"]["calm"] = calm_long
        for every in args.kill_every:
            chaos = run(client, f"chaoslong{every:g}", args.seed, float("inf"), every, args.steps,
                        job_file=args.config)
            out["long_run"][f"kill_every_{every:g}s"] = {**chaos, "slowdown": round(chaos["wall_s"] / calm_long["wall_s"], 3)}
    print(json.dumps({
        "benchmark": "chaos_train",
        "env": "CartPole-v1",
        "config": str(args.config.relative_to(REPO)) if args.config.is_relative_to(REPO) else str(args.config),
        "num_env_runners": 2,
        "spares": args.spares,
        **out,
        "target_slowdown": 1.3,
        "cores": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
