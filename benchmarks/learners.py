"""PPO env steps/s with the learner in the driver, on 1 learner actor and on 2 (gloo).

Same CartPole job (examples/cartpole_ppo.toml: 256-step batches, 20 epochs of one
minibatch), a fixed number of iterations each, on one embedded cluster per setting.
Reports env steps/s and where an iteration's time goes (sampling, the update as the
driver sees it, the update inside a learner, the weight fetch + push). Prints JSON.
Usage: python benchmarks/learners.py [--iters 150]
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import ROOT, emit

from ftrl.config import load_job


def run(num_learners: int, iters: int) -> dict:
    job = load_job(f"{ROOT}/examples/cartpole_ppo.toml")
    cfg = job.config
    cfg.learners(num_learners=num_learners).debugging(seed=1)
    algo = cfg.build()
    rows = []
    try:
        algo.train()  # first epoch formed, weights pushed
        t0 = time.perf_counter()
        steps0 = algo.env_steps_sampled
        for _ in range(iters):
            rows.append(algo.train())
        wall = time.perf_counter() - t0
        steps = algo.env_steps_sampled - steps0
    finally:
        algo.stop()

    def med(get) -> float:
        return round(statistics.median(get(r) for r in rows), 5)

    return {
        "num_learners": num_learners,
        "env_steps_per_s": round(steps / wall, 1),
        "iteration_s": round(wall / iters, 5),
        "sample_s": med(lambda r: r["timers"]["sample_s"]),
        "update_s_driver": med(lambda r: r["timers"]["learn_s"]),
        "update_s_in_learner": med(lambda r: r["learner"]["learn_time_s"]),
        "sync_weights_s": med(lambda r: r["timers"]["sync_weights_s"]),
        "sgd_steps_per_update": rows[-1]["learner"].get("num_sgd_steps"),
        "episode_return_mean_at_end": rows[-1]["episode_return_mean"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=150)
    args = ap.parse_args()
    results = [run(n, args.iters) for n in (0, 1, 2)]
    base = results[1]["env_steps_per_s"]
    emit({
        "benchmark": "learners",
        "job": "examples/cartpole_ppo.toml (256 steps per batch, 20 epochs x 1 minibatch)",
        "iterations": args.iters,
        "results": results,
        "two_vs_one_learner": round(results[2]["env_steps_per_s"] / base, 3),
    })


if __name__ == "__main__":
    main()
