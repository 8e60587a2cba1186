"""Seed 002's experiment in small: population-based training of IMPALA on BoxWorld-like
rooms, mutating lr, entropy_coeff and epsilon (TensorFlow's RMSProp, as theirs), ranked
on the share of solved episodes, with more members than room (members take turns at
their perturbation points), runners asking for `spot` workers and drivers for
`ondemand` ones (the embedded cluster offers both; on a real cluster, start workers with
`ftrl worker --resources spot=16` and `--resources ondemand=1`).

    python -m examples.boxworld.pbt [--members 4] [--minutes 10] [--coordinator HOST:PORT]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ftrl
from ftrl import tune

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--concurrent", type=int, default=2, help="trials running at once (the rest wait their turn)")
    ap.add_argument("--minutes", type=float, default=10.0, help="each member's training time")
    ap.add_argument("--coordinator", default=None, help="a running cluster (default: an embedded one)")
    ap.add_argument("--storage", default="ftrl_results")
    args = ap.parse_args()
    job = ftrl.load_job(str(HERE.parent / "boxworld_impala.toml"))
    scheduler = tune.PopulationBasedTraining(
        time_attr="env_steps_sampled", perturbation_interval=100_000, quantile_fraction=0.25,
        hyperparam_mutations={"lr": tune.loguniform(1e-4, 3e-3), "entropy_coeff": tune.uniform(0.001, 0.02),
                              "epsilon": [0.1, 1e-5]})  # the seed's perturbed epsilons
    tuner = ftrl.Tuner(
        job, param_space={"lr": tune.loguniform(1e-4, 3e-3), "entropy_coeff": tune.uniform(0.001, 0.02)},
        tune_config=ftrl.TuneConfig(num_samples=args.members, max_concurrent_trials=args.concurrent, seed=0,
                                    metric="custom_metrics/solved_mean", mode="max", scheduler=scheduler),
        run_config=ftrl.RunConfig(name="boxworld-pbt", storage_path=args.storage,
                                  stop={"time_s": args.minutes * 60}),
        client=ftrl.Client(args.coordinator) if args.coordinator else None)
    results = tuner.fit()
    best = results.get_best_result()
    print(f"best: {best.trial_id} solved share {best.metrics.get('custom_metrics/solved_mean')} with {best.config}")


if __name__ == "__main__":
    main()
