"""Env steps and wall seconds for an algorithm (PPO by default; APPO/IMPALA with their
example configs) to reach a 100-episode mean return of 475 on
CartPole-v1, from the command, over several seeds. Prints ONE JSON object.

    python benchmarks/learn.py [--seeds 0 1 2] [--config examples/cartpole_ppo.toml]
                               [--num-env-runners 0] [--max-steps 200000]

Each seed runs the README's command as a new user would, `ftrl train --config FILE
--seed S --output DIR` (an embedded local cluster: coordinator, worker, driver actor,
and `--num-env-runners` runner actors), and `wall_s` is the time from spawning the
command to the moment its `metrics.jsonl` shows the row that reached the target
(polled every 10 ms); `exit_s` is when the command had exited (teardown included).

Target (issue 10): return 475 in under 10 s from the command, 3 of 3 seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FTRL = [sys.executable, "-m", "ftrl"]


def machine() -> dict:
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }
    try:
        import psutil

        info["load_avg_1m"] = os.getloadavg()[0]
        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except (ImportError, OSError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def run_seed(config_path: Path, seed: int, num_env_runners: int, target: float, max_steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="ftrl-learn-") as out:
        metrics = Path(out) / "metrics.jsonl"
        cmd = [*FTRL, "train", "--config", str(config_path), "--seed", str(seed), "--output", out,
               "--num-env-runners", str(num_env_runners), "--stop-reward", str(target),
               "--stop-timesteps", str(max_steps), "--quiet"]
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first_s = solved_s = None
        row: dict = {}
        seen = 0
        deadline = t0 + 600
        while time.monotonic() < deadline:
            done = proc.poll() is not None
            if metrics.exists():
                text = metrics.read_text()
                lines = text.splitlines()
                complete = lines if text.endswith("\n") else lines[:-1]  # the last may be half written
                for line in complete[seen:]:
                    row = json.loads(line)
                    if first_s is None:
                        first_s = time.monotonic() - t0
                    ret = row.get("episode_return_mean")
                    if solved_s is None and ret is not None and ret >= target:
                        solved_s = time.monotonic() - t0
                seen = max(seen, len(complete))
            if done:
                break
            time.sleep(0.01)
        else:
            proc.kill()
        _, err = proc.communicate(timeout=60)
        exit_s = time.monotonic() - t0
    return {
        "seed": seed,
        "solved": solved_s is not None,
        "env_steps": row.get("env_steps_sampled"),
        "iterations": row.get("iteration"),
        "episode_return_mean": row.get("episode_return_mean"),
        "wall_s": round(solved_s, 2) if solved_s is not None else None,
        "first_iteration_s": round(first_s, 2) if first_s is not None else None,
        "exit_s": round(exit_s, 2),
        "returncode": proc.returncode,
        **({"stderr_tail": err[-800:]} if proc.returncode else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "cartpole_ppo.toml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-env-runners", type=int, default=0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--max-steps", type=int, default=200_000)
    args = parser.parse_args()
    job_file = tomllib.loads(args.config.read_text())
    runs = [run_seed(args.config.resolve(), s, args.num_env_runners, args.target, args.max_steps) for s in args.seeds]
    solved = [r for r in runs if r["solved"]]
    out = {
        "benchmark": "learn",
        "env": job_file.get("env") or job_file.get("environment", {}).get("env", "CartPole-v1"),
        "algo": str(job_file.get("algo", "PPO")).upper(),
        "target_episode_return_mean": args.target,
        "window_episodes": 100,
        "num_env_runners": args.num_env_runners,
        "config": str(args.config.resolve().relative_to(REPO) if args.config.resolve().is_relative_to(REPO) else args.config),
        "runs": runs,
        "max_env_steps": max((r["env_steps"] or 0) for r in runs),
        "max_wall_s": max(r["wall_s"] for r in solved) if len(solved) == len(runs) else None,
        "all_solved": len(solved) == len(runs),
        "meets_target": len(solved) == len(runs) and all(r["wall_s"] < 10.0 for r in runs),
        "machine": machine(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
