"""The driver's side of the user's callbacks on a real in-process Algorithm: the row holds
what `on_train_result` changed, driver-logged values as custom_metrics[NAME], episode
values as NAME_mean/min/max over the return window, the counters survive a resume, and
`on_checkpoint_loaded` runs after one."""

from __future__ import annotations

import json

import ftrl
from ftrl.rl.callbacks import Callbacks
from tests.trained import train_and_checkpoint

CALLS: list[str] = []


class DriverSide(Callbacks):
    def __init__(self):
        self.built = len(CALLS)

    def on_algorithm_init(self, *, algorithm, metrics_logger, **kwargs):
        CALLS.append(f"init {algorithm.iteration}")
        metrics_logger.log_value("inits", 1, reduce="sum")

    def on_checkpoint_loaded(self, *, algorithm, **kwargs):
        CALLS.append(f"loaded {algorithm.iteration}")

    def on_episode_end(self, *, episode, metrics_logger, **kwargs):
        metrics_logger.log_value("ret", episode.get_return())

    def on_evaluate_end(self, *, evaluation_metrics, metrics_logger, **kwargs):
        metrics_logger.log_value("eval_episodes", evaluation_metrics["num_episodes"])

    def on_train_result(self, *, algorithm, result, metrics_logger, **kwargs):
        CALLS.append(f"result {result['iteration']}")
        metrics_logger.log_value("twice_iteration", 2 * result["iteration"])
        result["user_key"] = "set by on_train_result"
        del result["time_this_iter_s"]


def _config():
    return (ftrl.PPOConfig().environment("CartPole-v1")
            .env_runners(num_envs_per_env_runner=4)
            .training(train_batch_size=256, minibatch_size=128, num_epochs=1)
            .evaluation(evaluation_interval=2, evaluation_duration=3)
            .debugging(seed=0))


def _rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_driver_hooks_shape_the_row_and_come_back_after_a_resume(tmp_path):
    CALLS.clear()
    config = _config().callbacks(f"{__name__}:DriverSide")
    results = train_and_checkpoint(config, tmp_path, iterations=2)
    assert CALLS == ["init 0", "result 1", "result 2"]
    first, second = results
    assert first["user_key"] == "set by on_train_result" and "time_this_iter_s" not in first
    assert first["custom_metrics"]["inits"] == 1.0 and "inits" not in second["custom_metrics"]
    assert first["custom_metrics"]["twice_iteration"] == 2.0 and second["custom_metrics"]["twice_iteration"] == 4.0
    assert second["custom_metrics"]["eval_episodes"] == 3.0 and "eval_episodes" not in first["custom_metrics"]
    # episode values over the same window as the return
    assert second["custom_metrics"]["ret_mean"] == second["episode_return_mean"]
    assert second["custom_metrics"]["ret_max"] == second["episode_return_max"]
    assert second["evaluation"]["custom_metrics"]["ret_mean"] == second["evaluation"]["episode_return_mean"]
    rows = _rows(tmp_path)
    assert [r["user_key"] for r in rows] == ["set by on_train_result"] * 2
    assert rows[1]["custom_metrics"]["twice_iteration"] == 4.0 and rows[1]["num_callback_errors"] == 0
    # a resumed driver builds its callbacks again: loaded, then init, then rows as before
    CALLS.clear()
    again = config.build(output_dir=tmp_path, resume=True)
    try:
        third = again.train()
    finally:
        again.stop()
    assert CALLS == ["loaded 2", "init 2", "result 3"]
    assert third["custom_metrics"]["ret_mean"] == third["episode_return_mean"]


def test_a_raising_driver_hook_is_counted_and_the_run_goes_on(tmp_path):
    config = _config().callbacks("ftrl.testing.callbacks:Raising").evaluation(evaluation_interval=None)
    results = train_and_checkpoint(config, tmp_path, iterations=3)
    errors = [r["num_callback_errors"] for r in results]
    assert errors == sorted(errors) and errors[-1] >= 3  # on_train_result each time, plus episodes
    assert all(r["custom_metrics"]["kept_mean"] == 1.0 for r in results)  # the raising episodes' are dropped
    again = config.build(output_dir=tmp_path, resume=True)
    try:
        assert again.train()["num_callback_errors"] > errors[-1]  # the counter went on from the state
    finally:
        again.stop()
