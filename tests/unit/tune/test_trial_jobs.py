"""ftrl.tune.trial_jobs: a trial's job dict, what it keeps of a row, and its stop criteria."""

from __future__ import annotations

import math

from ftrl.tune.trial_jobs import (
    RESULT_KEYS,
    improves,
    job_dict,
    kept_result,
    metric_value,
    stop_reached,
)

BASE = {"algo": "PPO", "env": "CartPole-v1", "lr": 1e-3, "stop": {"stop_time_s": 60}}


def test_the_job_is_the_base_with_the_trials_config_and_the_driver_checked_stops():
    job = job_dict(BASE, {"lr": 3e-3, "gamma": 0.9},
                   {"iteration": 50.0, "env_steps_sampled": 1e5, "episode_return_mean": 450, "time_s": 9}, "max")
    assert job["lr"] == 3e-3 and job["gamma"] == 0.9 and job["env"] == "CartPole-v1"
    assert job["stop"] == {"stop_time_s": 60, "stop_iters": 50, "stop_timesteps": 100000, "stop_reward": 450.0}
    assert isinstance(job["stop"]["stop_iters"], int)
    assert BASE["stop"] == {"stop_time_s": 60} and BASE["lr"] == 1e-3  # the base is left as it is
    # a return bound with mode "min" is the tuner's to check, not the driver's
    assert "stop_reward" not in job_dict(BASE, {}, {"episode_return_mean": 10}, "min")["stop"]


def test_stop_reached_uses_ray_tunes_rule():
    stop = {"iteration": 10, "episode_return_mean": 200.0}
    assert stop_reached({"iteration": 9, "episode_return_mean": 150.0}, stop) is None
    assert stop_reached({"iteration": 10}, stop) == "iteration 10 >= 10"
    assert stop_reached({"iteration": 3, "episode_return_mean": 201.5}, stop) == "episode_return_mean 201.5 >= 200.0"
    assert stop_reached({"iteration": "x"}, stop) is None


def test_kept_result_and_the_best_metric():
    row = {k: 1 for k in RESULT_KEYS} | {"score": 2.5, "learner": {"lr": 1}}
    assert kept_result(row, "score") == {k: 1 for k in RESULT_KEYS} | {"score": 2.5}
    assert metric_value(row, "score") == 2.5 and metric_value(row, "missing") is None
    assert metric_value({"score": "n/a"}, "score") is None
    assert improves(1.0, None, "max") and improves(2.0, 1.0, "max") and not improves(1.0, 1.0, "max")
    assert improves(0.5, 1.0, "min") and not improves(2.0, 1.0, "min")
    assert not improves(math.nan, None, "max") and not improves(None, 1.0, "max")


def test_metric_stop_and_time_keys_reach_into_nested_dicts_by_slash_paths():
    """Tune's nested names: "custom_metrics/NAME_mean", "evaluation/episode_return_mean"."""
    from ftrl.tune.experiment import row_value

    row = {"iteration": 4, "custom_metrics": {"angle_mean": 0.25, "flag": True},
           "evaluation": {"episode_return_mean": 200.0}, "a/b": 1.0}
    assert row_value(row, "custom_metrics/angle_mean") == 0.25
    assert row_value(row, "evaluation/episode_return_mean") == 200.0
    assert row_value(row, "a/b") == 1.0  # a key with a slash in it wins
    assert row_value(row, "custom_metrics/missing") is None and row_value(row, "iteration/x") is None
    assert metric_value(row, "custom_metrics/angle_mean") == 0.25
    assert metric_value(row, "custom_metrics/flag") is None  # a bool is no metric
    kept = kept_result(row, "custom_metrics/angle_mean")
    assert kept == {"iteration": 4, "custom_metrics/angle_mean": 0.25}
    assert metric_value(kept, "custom_metrics/angle_mean") == 0.25  # and read back from it
    assert stop_reached(row, {"evaluation/episode_return_mean": 150}) == (
        "evaluation/episode_return_mean 200.0 >= 150")
    assert stop_reached(row, {"custom_metrics/angle_mean": 1}) is None
