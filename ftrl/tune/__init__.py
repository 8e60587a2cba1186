"""Tuning, Ray Tune-style: `ftrl.tune.Tuner` (also `ftrl.Tuner`), search spaces
(`grid_search`, `choice`, `uniform`, `loguniform`, `randint`, quantized ones), the FIFO
and population-based-training schedulers, and the experiment's files.

    from ftrl import tune
    tune.Tuner(config, param_space={"lr": tune.loguniform(1e-4, 1e-2)},
               tune_config=tune.TuneConfig(num_samples=4, scheduler=tune.PopulationBasedTraining(
                   perturbation_interval=5, hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-2)})),
               run_config=tune.RunConfig(storage_path="ftrl_results", stop={"iteration": 50})).fit()

Modules: search (spaces, variants), schedulers (FIFO, PBT as pure functions),
experiment (experiment.json, lineage.jsonl, statuses), controller (the scheduler actor,
the loop composing its parts: placement, exploit, preemption, adoption, persistence,
trial_jobs), tuner (Tuner, configs, results), report (status table, plot). Names load
on first use: `import ftrl.tune` stays light and imports no torch.
"""

from __future__ import annotations

from typing import Any

_LAZY: dict[str, str] = {
    **{name: "ftrl.tune.search" for name in (
        "grid_search", "choice", "uniform", "loguniform", "randint", "quniform", "qloguniform",
        "qrandint", "lograndint")},
    "FIFOScheduler": "ftrl.tune.schedulers",
    "PopulationBasedTraining": "ftrl.tune.schedulers",
    **{name: "ftrl.tune.tuner" for name in (
        "Tuner", "TuneConfig", "RunConfig", "FailureConfig", "Result", "ResultGrid")},
}


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'ftrl.tune' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = sorted(_LAZY)
