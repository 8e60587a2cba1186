"""The driver's parts, each built through its constructor with small fakes: the run
state's bookkeeping and row, the driver state made of it and applied back, the runner
set's counters and stats, and the asynchronous learner in front of a learner."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.driver import state as driver_state
from ftrl.rl.driver.async_learner import AsyncLearner, TrainBatch, lag_stats, within_lag
from ftrl.rl.driver.metrics import EpisodeWindow
from ftrl.rl.driver.output import RunOutput
from ftrl.rl.driver.run_state import RunState
from ftrl.rl.driver.runners import DriverRunners
from ftrl.rl.sampling.filters import MeanStdFilter, make_filter
from ftrl.wire.errors import ConfigError


def _run(algo_counters: tuple[str, ...] = ()) -> RunState:
    return RunState(config_dict={"algo": "PPO"}, spec_dict={"obs_dim": 2}, obs_filter=make_filter("MeanStdFilter", (2,)),
                    episodes=EpisodeWindow(3), algo_counters=algo_counters)


def _delta(rows: np.ndarray) -> dict[str, Any]:
    runner = MeanStdFilter((2,))
    runner(rows)
    return runner.get_delta()


# --------------------------------------------------------------------------- RunState


def test_a_sample_is_recorded_into_the_run_and_this_iterations_counts(caplog):
    run = _run()
    run.begin_iteration()
    run.record_sample({"env_steps": 8, "episodes": {"returns": [1.0, 3.0], "lengths": [4, 6]},
                       "filter_delta": _delta(np.ones((8, 2)))})
    run.record_sample({"env_steps": 4, "filter_delta": {"kind": "NoFilter"}, "worker_index": 2})  # a bad delta
    assert (run.env_steps_sampled, run.this_iter.env_steps, run.this_iter.samples, run.this_iter.episodes) == (12, 12, 2, 2)
    assert run.filter.get_state()["stats"]["n"] == 8  # the bad delta was ignored, with a warning
    assert "ignoring a filter delta from runner 2" in caplog.text
    run.begin_iteration()
    assert run.this_iter.env_steps == 0 and run.env_steps_sampled == 12  # the totals go on


def test_the_row_has_the_runs_keys_first_and_the_algorithms_only_where_new():
    run = _run()
    run.iteration, run.time_base = 3, 10.0
    run.record_sample({"env_steps": 5, "episodes": {"returns": [2.0], "lengths": [5]}})
    row = run.result_row({"iteration": -1, "learner": {"lr": 1e-3}}, 0.5, {"num_env_runners": 0},
                         {"weights_version": 7})
    assert row["iteration"] == 3 and row["learner"] == {"lr": 1e-3}  # an algorithm cannot shadow the run's keys
    assert row["episode_return_mean"] == 2.0 and row["weights_version"] == 7 and row["num_env_runners"] == 0
    assert list(row)[:6] == ["iteration", "env_steps_sampled", "env_steps_sampled_this_iter", "env_steps_trained",
                             "episodes_total", "episodes_this_iter"]
    assert row["time_s"] == 10.0  # no training time before the clock starts
    run.start_clock()
    time.sleep(0.01)
    assert run.time_s > 10.0


# --------------------------------------------------------------------------- the driver state of a run


class _Runners:
    """What the state functions read and restore of the runners."""

    def __init__(self) -> None:
        self.restored: dict[str, Any] | None = None

    def counters(self) -> dict[str, Any]:
        return {"env_runners": {"num_env_runner_restarts": 2}}

    def restore_counters(self, saved: dict[str, Any]) -> None:
        self.restored = saved

    def known_incarnations(self) -> dict[str, Any]:
        return {"env_runners": [{"name": "j/env_runner/0", "incarnation": 4, "restarts": 3}]}

    def newest_synced_filter(self) -> tuple[int, dict[str, Any]] | None:
        return None


class _Learners:
    """What the state functions read and restore of a learner group."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {"num_learner_restarts": 1}
        self.previous: list[dict[str, Any]] | None = None

    def get_counters(self) -> dict[str, int]:
        return dict(self.counters)

    def set_counters(self, counters: dict[str, Any]) -> None:
        self.counters = {k: self.counters.get(k, 0) + v for k, v in counters.items()}

    def counters_from_row(self, row: dict[str, Any]) -> dict[str, int]:
        return {"num_learner_restarts": int(row.get("num_learner_restarts", 0))}

    def known_incarnations(self) -> list[dict[str, Any]]:
        return [{"name": "j/learner/0", "incarnation": 2, "restarts": 1}]

    def remember_previous(self, previous: list[dict[str, Any]]) -> None:
        self.previous = previous

    def resume_at(self, version: int, fallback: dict[str, Any] | None) -> None:
        raise AssertionError("not resumed here")

    def state_at(self, version: int) -> dict[str, Any] | None:
        return None


def test_a_driver_state_made_of_a_run_comes_back_into_another_run():
    run = _run(algo_counters=("num_samples_invalid",))
    run.iteration, run.env_steps_sampled, run.env_steps_trained, run.time_base = 5, 640, 600, 12.5
    run.record_sample({"env_steps": 0, "episodes": {"returns": [9.0], "lengths": [9]},
                       "filter_delta": _delta(np.arange(6.0).reshape(3, 2))})
    run.algo_counters["num_samples_invalid"] = 3
    run.hyperparams["lr"] = 1e-3
    run.last_row = {"iteration": 5, "x": 1}
    state = driver_state.driver_state(run, algo_name="PPO", learner_version=9, runners=_Runners(),
                                      learner_group=_Learners())
    assert set(state) == {"format", "algo", "iteration", "env_steps_sampled", "env_steps_trained", "time_s", "config",
                          "space_spec", "learner_version", "learner_counters", "filter", "episodes", "runner_counters",
                          "actors", "rng", "algo_counters", "callback_counts", "num_driver_resumes", "hyperparams", "row",
                          "saved_at"}
    assert state["actors"]["learners"][0]["incarnation"] == 2 and state["row"] == {"iteration": 5, "x": 1}

    resumed = _run(algo_counters=("num_samples_invalid",))
    counters = resumed.algo_counters  # the learner thread holds this very dict
    learners, applied = _Learners(), []
    driver_state.apply_driver_state(resumed, state, learner_group=learners, apply_hyperparams=applied.append)
    assert (resumed.iteration, resumed.env_steps_sampled, resumed.env_steps_trained, resumed.time_base) == (5, 640, 600,
                                                                                                            state["time_s"])
    assert resumed.algo_counters is counters and counters == {"num_samples_invalid": 3}
    assert resumed.filter.get_state()["stats"]["n"] == 3 and list(resumed.episodes.returns) == [9.0]
    assert resumed.saved_actors == state["actors"] and learners.previous == state["actors"]["learners"]
    assert learners.counters == {"num_learner_restarts": 2}  # added to what the group counted since it began
    assert applied == [{"lr": 1e-3}] and resumed.last_checkpoint_iteration == 5
    runners = _Runners()
    driver_state.restore_runner_counters(resumed, runners)
    assert runners.restored == {"env_runners": {"num_env_runner_restarts": 2}}


def test_a_row_newer_than_the_state_moves_the_counters_on(tmp_path: Path, caplog):
    output = RunOutput(tmp_path, keep_checkpoints=2)
    output.metrics_log.append({"iteration": 7, "env_steps_sampled": 700, "time_s": 30.0, "episodes_total": 11,
                               "weights_version": 7, "num_env_runner_restarts": 4})
    run = _run()

    class _FreshLearner:
        version = 0

        def set_state(self, state: dict[str, Any]) -> None:
            raise AssertionError("there is no learner state to load")

    driver_state.resume(run, output, learner=_FreshLearner(), learner_group=None,
                        check_compatible=lambda state: None, apply_hyperparams=lambda values: None)
    assert (run.iteration, run.env_steps_sampled, run.time_base, run.episodes.episodes_total) == (7, 700, 30.0, 11)
    assert run.saved_runner_counters == {"env_runners": {"num_env_runner_restarts": 4}}
    assert run.last_row is not None and run.last_row["iteration"] == 7
    assert "no learner state of version 7" in caplog.text


def test_a_run_without_an_output_directory_cannot_save_or_resume():
    from ftrl.rl.algorithms.ppo import PPO

    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0, num_envs_per_env_runner=1)
              .debugging(seed=0))
    with pytest.raises(ConfigError, match="resume needs an output directory"):
        PPO(config, resume=True)
    algo = PPO(config)
    try:
        with pytest.raises(ConfigError, match="nowhere to write checkpoints"):
            algo.save_checkpoint()
        assert algo.flush_state() and algo.latest_checkpoint() is None
    finally:
        algo.stop()


# --------------------------------------------------------------------------- DriverRunners


class _Local:
    def __init__(self) -> None:
        self.num_sub_env_restarts = 2
        self.weights_version = 5
        self.synced: tuple[int, dict[str, Any]] | None = None

    def set_weights(self, version: int, weights: np.ndarray, filter_state: dict[str, Any]) -> None:
        self.synced = (version, filter_state)
        self.weights_version = version


def test_a_runner_set_that_samples_in_the_driver_reports_and_restores_its_counters():
    local = _Local()
    runners = DriverRunners(PPOConfig(), {}, local=local)
    runners.sync_weights(6, np.zeros(3, np.float32), {"kind": "NoFilter"})
    assert local.synced == (6, {"kind": "NoFilter"}) and runners.sampling_version() == 6
    assert runners.versions_used() == [6]
    assert runners.counters() == {"local_sub_env_restarts": 2}
    runners.restore_counters({"local_sub_env_restarts": 3})
    stats = runners.stats()
    assert stats["num_sub_env_restarts"] == 5 and stats["num_env_runners"] == 0 and stats["num_samples_in_flight"] == 0
    assert runners.known_incarnations() == {} and runners.newest_synced_filter() is None
    runners.scale(0)  # nothing to resize
    with pytest.raises(ConfigError, match="num_env_runners=0"):
        runners.scale(2)


# --------------------------------------------------------------------------- AsyncLearner


class _Learner:
    """An in-process learner whose update takes `delay_s` and counts the versions it learned on."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.version = 0
        self.delay_s = delay_s
        self.fail = fail
        self.updates: list[int] = []
        self.updating = threading.Event()  # set while an update runs

    def update(self, fragments: list[dict[str, Any]], env_steps_sampled: int = 0) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("the loss is NaN")
        self.updating.set()
        time.sleep(self.delay_s)
        self.updating.clear()
        self.updates.append(len(fragments))
        self.version += 1
        return {"num_samples": 4 * len(fragments), "policy_loss": 1.0, "weights_version": self.version}

    def get_weights(self) -> tuple[int, np.ndarray]:
        return self.version, np.full(2, float(self.version), np.float32)

    def get_state(self) -> dict[str, Any]:
        return {"version": self.version}


def _async(learner: _Learner, counters: dict[str, int], **options: Any) -> AsyncLearner:
    options = {"queue_size": 2, "max_policy_lag": 1, "broadcast_interval": 2, "batch_env_steps": 8, **options}
    return AsyncLearner(learner, env_steps_sampled=lambda: 0, counters=counters, **options)


def _wait(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_async_learner_learns_off_its_queue_publishes_every_interval_and_drops_stale_samples():
    counters = {"num_samples_dropped_stale": 0, "env_steps_dropped_stale": 0}
    learner = _Learner()
    access = _async(learner, counters)
    assert access.weights_for_runners()[0] == 0  # the learner's own before it starts
    access.start()
    try:
        for _ in range(3):  # 3 batches of 2 fragments of 4 env steps, sampled with version 0
            access.add({"x": np.zeros(1)}, 0, 4)
            access.add({"x": np.zeros(1)}, 0, 4)
            access.queue_full_batches(while_full=lambda: None)
        _wait(lambda: counters["num_samples_dropped_stale"] == 2)
        # version 0 is more than max_policy_lag=1 behind the third batch's learner (version 2)
        assert learner.updates == [2, 2] and counters["env_steps_dropped_stale"] == 8
        assert access.weights_for_runners()[0] == 2  # published after the 2nd update (broadcast_interval)
        window = access.take_window()
        assert window["num_learner_updates_this_iter"] == 2 and window["env_steps_trained_this_iter"] == 16
        assert (window["policy_lag_min"], window["policy_lag_max"]) == (0, 1)
        assert access.take_window()["num_learner_updates_this_iter"] == 0  # a new window
    finally:
        access.stop()


def test_a_batch_is_full_at_the_fragment_that_fills_it_though_more_came_in_the_same_harvest():
    """Fragments taken together (one harvest of several runners) still make batches of
    `batch_env_steps` where their sizes add up: 4 + (4, 4) is a batch of 8 and 4 waiting,
    not one of 12 (an IMPALA exploit's test saw 480-step batches of 320)."""
    learner = _Learner()
    access = _async(learner, {"num_samples_dropped_stale": 0, "env_steps_dropped_stale": 0}, max_policy_lag=100)
    access.start()
    try:
        access.add({"x": np.zeros(1)}, 0, 4)
        access.queue_full_batches(while_full=lambda: None)
        for _ in range(2):
            access.add({"x": np.zeros(1)}, 0, 4)
        access.queue_full_batches(while_full=lambda: None)
        _wait(lambda: len(learner.updates) == 1)
        access.add({"x": np.zeros(1)}, 0, 4)
        access.queue_full_batches(while_full=lambda: None)
        _wait(lambda: len(learner.updates) == 2)
        assert learner.updates == [2, 2]
        # an exploit halves the batch: the one being filled is full at once, not one fragment later
        access.add({"x": np.zeros(1)}, 0, 4)
        access.reconfigure(queue_size=2, max_policy_lag=100, broadcast_interval=2, batch_env_steps=4)
        access.queue_full_batches(while_full=lambda: None)
        _wait(lambda: len(learner.updates) == 3)
        assert learner.updates == [2, 2, 1]
    finally:
        access.stop()


class _SlowPublishLearner(_Learner):
    """Publishing its weights takes a while: the gap between an update and its window entry."""

    def get_weights(self) -> tuple[int, np.ndarray]:
        time.sleep(0.2)
        return super().get_weights()


def test_a_window_taken_as_soon_as_the_update_count_grows_holds_that_update():
    """The driver ends a window when it sees `num_updates` grow; that update must be in the
    window it takes then, not the next (APPO's rows once summed 2 updates over 3 windows)."""
    learner = _SlowPublishLearner()
    access = _async(learner, {"num_samples_dropped_stale": 0, "env_steps_dropped_stale": 0},
                    broadcast_interval=1, max_policy_lag=100)
    access.start()
    try:
        for expected in range(1, 4):
            assert access.put(_one_fragment_batch(), timeout_s=5.0)
            _wait(lambda expected=expected: access.num_updates >= expected)
            assert access.take_window()["num_learner_updates_this_iter"] == 1
    finally:
        access.stop()


def test_no_update_runs_while_the_learner_is_paused_and_reads_wait_for_one_to_end():
    learner = _Learner(delay_s=0.3)
    access = _async(learner, {"num_samples_dropped_stale": 0, "env_steps_dropped_stale": 0}, max_policy_lag=100)
    access.start()
    try:
        with access.paused():
            access.put(_one_fragment_batch(), timeout_s=1.0)
            time.sleep(0.3)
            assert learner.updates == []  # held off while paused
            learner.version = 41  # an exploit loads a state...
            access.publish()  # ...and makes its weights the runners' next
        assert access.weights_for_runners()[0] == 41
        _wait(learner.updating.is_set)
        assert access.get_state() == {"version": 42}  # waited for the update in progress: never mid-update
    finally:
        access.stop()


def test_a_failed_update_reaches_the_driver_at_its_next_put():
    access = _async(_Learner(fail=True), {"num_samples_dropped_stale": 0, "env_steps_dropped_stale": 0})
    access.start()
    try:
        assert access.put(_one_fragment_batch(), timeout_s=1.0)
        _wait(lambda: access.error is not None)
        with pytest.raises(RuntimeError, match="NaN"):
            access.put(_one_fragment_batch(), timeout_s=1.0)
    finally:
        access.stop()


def test_an_embedded_cluster_offers_what_the_job_asks_for(tmp_path):
    from ftrl.config import PPOConfig
    from ftrl.rl.driver.embedded import (
        cluster_custom_resources,
        cluster_slots,
        embedded_cluster_for,
    )

    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=40, custom_resources_per_env_runner={"spot": 1})
              .resources(num_cpus_for_main_process=2, custom_resources_for_main_process={"ondemand": 0.5}))
    assert cluster_slots(config) == 42  # the driver's CPUs count
    assert cluster_custom_resources(config) == {"spot": 40.0, "ondemand": 0.5}
    cluster = embedded_cluster_for(config, state_dir=str(tmp_path))  # made, not started
    assert cluster.worker_args[-2:] == ["--resources", "ondemand=0.5,spot=40"]


def _one_fragment_batch() -> TrainBatch:
    batch = TrainBatch()
    batch.add({"x": 1}, 0, 8)
    return batch


def test_a_fragment_is_dropped_by_its_first_step_and_its_lag_is_its_steps_mean():
    """max_policy_lag checks the weights a fragment started with (the oldest); the reported
    lag is the mean over its steps (weights pushed mid-fragment act from the next step)."""
    batch = TrainBatch()
    batch.add({"x": 1}, 5, 8, mean_version=5.5)  # 2 behind at its start: kept, 1.5 on average
    batch.add({"x": 2}, 4, 8, mean_version=4.9)  # 3 behind at its start: dropped
    batch.add({"x": 3}, 6, 8)  # one version throughout
    counters = {"num_samples_dropped_stale": 0, "env_steps_dropped_stale": 0}
    used, lags = within_lag(batch, 7, 2, counters)
    assert used == [{"x": 1}, {"x": 3}] and lags == [1.5, 1.0]
    assert counters == {"num_samples_dropped_stale": 1, "env_steps_dropped_stale": 8}
    assert lag_stats(lags) == {"policy_lag_min": 1.0, "policy_lag_mean": 1.25, "policy_lag_max": 1.5}
