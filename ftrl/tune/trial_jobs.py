"""A trial as a job on the cluster: the job dict it is submitted as, what the tuner keeps
of the metrics rows it reports, and when a stop criterion is reached. Pure functions,
tested without a cluster. Imports no torch and no client.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ftrl.tune.experiment import DRIVER_STOPS, row_value

#: The row keys a trial's `last_result` keeps (with the experiment's metric).
RESULT_KEYS = ("iteration", "env_steps_sampled", "time_s", "episode_return_mean", "weights_version",
               "num_env_runner_restarts", "num_healthy_env_runners")


def job_dict(base_job: Mapping[str, Any], config: Mapping[str, Any], stop: Mapping[str, float],
             mode: str) -> dict[str, Any]:
    """The job a trial is submitted as: the base job with the trial's config over it,
    and the stop criteria its own driver can check exactly (iterations, env steps; the
    return with mode "max") in its [stop] table."""
    job = {k: v for k, v in base_job.items() if k != "stop"}
    job.update(config)
    driver_stop = dict(base_job.get("stop") or {})
    for key, bound in stop.items():
        name = DRIVER_STOPS.get(key)
        if name is not None:
            driver_stop[name] = int(bound) if name != "stop_reward" else float(bound)
        elif key == "episode_return_mean" and mode == "max":
            driver_stop["stop_reward"] = float(bound)
    job["stop"] = driver_stop
    return job


def kept_result(row: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """What a trial keeps of a metrics row (its `last_result`): a nested metric under its
    "/" path ("custom_metrics/NAME_mean")."""
    kept = {k: row[k] for k in RESULT_KEYS if k in row}
    value = row_value(row, metric)
    if value is not None:
        kept[metric] = value
    return kept


def metric_value(row: Mapping[str, Any], metric: str) -> float | None:
    """The row's value of the metric (a key or a "/" path), if it is a number (NaN included)."""
    value = row_value(row, metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def improves(value: float | None, best: float | None, mode: str) -> bool:
    """Whether `value` (not NaN) beats `best` (None: nothing yet) in `mode`."""
    if value is None or math.isnan(value):
        return False
    return best is None or (value > best if mode == "max" else value < best)


def stop_reached(row: Mapping[str, Any], stop: Mapping[str, float]) -> str | None:
    """The first stop criterion `row` reached (Ray Tune's rule: >=), described, or None."""
    for key, bound in stop.items():
        value = row_value(row, key)
        if isinstance(value, int | float) and value >= bound:
            return f"{key} {value} >= {bound}"
    return None
