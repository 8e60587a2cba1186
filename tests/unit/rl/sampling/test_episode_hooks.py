"""The episode side of the user's callbacks in a real EnvRunner: hooks called per
episode with RLlib's episode API, custom values per finished episode (none for a cut
one), infos read only when a hook asks, what crosses from a sub-env process, and a
raising hook that stops nothing."""

from __future__ import annotations

import logging
import math
import os

import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.callbacks import Callbacks
from ftrl.rl.sampling import env_runner
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.sub_env import wire_info


class Counting(Callbacks):
    """Counts each hook's calls and checks what episode hooks get."""

    def __init__(self):
        self.calls = {"start": 0, "step": 0, "end": 0, "sample": 0}
        self.lengths: list[int] = []
        self.ids: set[int] = set()

    def on_episode_start(self, *, episode, env_runner, env_index, env, metrics_logger, **kwargs):
        assert len(episode) == 0 and episode.custom_data == {} and env_index == episode.env_index
        assert env is None or hasattr(env, "step")
        episode.custom_data["steps"] = 0
        self.calls["start"] += 1

    def on_episode_step(self, *, episode, **kwargs):
        episode.custom_data["steps"] += 1
        assert len(episode) == episode.custom_data["steps"]
        self.calls["step"] += 1

    def on_episode_end(self, *, episode, metrics_logger, **kwargs):
        assert episode.id_ not in self.ids
        self.ids.add(episode.id_)
        assert episode.custom_data["steps"] == len(episode) - 1  # no step hook for the last step
        assert episode.get_return() == pytest.approx(sum(episode.get_rewards()))
        self.lengths.append(len(episode))
        metrics_logger.log_value("ret", episode.get_return())
        metrics_logger.log_value("len", len(episode), reduce="sum")
        self.calls["end"] += 1

    def on_sample_end(self, *, samples, metrics_logger, env_runner, **kwargs):
        metrics_logger.log_value("frag_steps", samples["obs"].shape[0] * samples["obs"].shape[1], reduce="sum")
        self.calls["sample"] += 1


class SampleOnly(Callbacks):
    def on_sample_end(self, *, metrics_logger, **kwargs):
        metrics_logger.log_value("n", 1)


def _runner(callbacks: str | None, env: str = "CartPole-v1", env_config: dict | None = None, envs: int = 4,
            frag: int = 100, remote: bool = False, restart: bool = False) -> EnvRunner:
    cfg = (PPOConfig().environment(env, env_config=env_config or {})
           .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=frag, remote_worker_envs=remote)
           .fault_tolerance(restart_failed_sub_environments=restart).callbacks(callbacks).debugging(seed=1))
    return EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False)


@pytest.fixture
def steps_seen(monkeypatch):
    """The `infos` argument of every vector step the runner makes."""
    seen: list = []
    real = env_runner._step_envs

    def spy(*args):
        seen.append(args[10] if len(args) > 10 else "absent")
        return real(*args)

    monkeypatch.setattr(env_runner, "_step_envs", spy)
    return seen


def test_episode_hooks_see_each_episode_once_and_its_values_come_with_its_return(steps_seen):
    runner = _runner(f"{__name__}:Counting")
    try:
        results = [runner.sample() for _ in range(3)]
        cb = runner._callbacks.callbacks
    finally:
        runner.stop()
    returns = np.concatenate([r["episodes"]["returns"] for r in results])
    lengths = np.concatenate([r["episodes"]["lengths"] for r in results])
    assert len(returns) > 20 and cb.calls["end"] == len(returns)
    np.testing.assert_allclose(np.concatenate([r["episodes"]["custom"]["ret"] for r in results]), returns)
    np.testing.assert_array_equal(np.concatenate([r["episodes"]["custom"]["len"] for r in results]), lengths)
    assert sorted(cb.lengths) == sorted(lengths.tolist())
    assert cb.calls["start"] == cb.calls["end"] + 4  # the 4 open episodes began too
    assert cb.calls["sample"] == 3 and all(r["sample_metrics"] == {"frag_steps": [400.0, "sum"]} for r in results)
    assert all(r["callback_counts"]["num_callback_errors"] == 0 for r in results)
    assert all(isinstance(x, list) for x in steps_seen)  # infos were kept: the hooks read them


def test_without_episode_hooks_no_info_is_kept(steps_seen):
    for callbacks in (None, f"{__name__}:SampleOnly"):
        steps_seen.clear()
        runner = _runner(callbacks)
        try:
            result = runner.sample()
        finally:
            runner.stop()
        assert runner._episode_hooks is None and "custom" not in result["episodes"]
        assert steps_seen and all(x is None for x in steps_seen)  # the hot loop as without callbacks
        assert ("sample_metrics" in result) == (callbacks is not None)
        assert ("callback_counts" in result) == (callbacks is not None)


def test_custom_metrics_from_the_envs_info_in_process_and_from_sub_env_processes():
    for remote in (False, True):
        runner = _runner("ftrl.testing.callbacks:PoleAngle", env="ftrl.testing.envs:make_info_env", envs=2,
                         frag=150, remote=remote)
        try:
            result = runner.sample()
        finally:
            runner.stop()
        eps = result["episodes"]
        custom = eps["custom"]
        assert len(eps["returns"]) >= 3
        np.testing.assert_array_equal(custom["steps"], eps["lengths"])
        assert np.all((custom["pole_angle_max"] > 0) & (custom["pole_angle_max"] < 0.5))
        pids = set(custom["pid"].tolist())
        if remote:  # the info came from the sub-env processes; the object in it did not cross
            assert os.getpid() not in pids and len(pids) <= 2
            assert result["callback_counts"]["num_info_values_dropped"] == 150 * 2
        else:
            assert pids == {os.getpid()}
            assert result["callback_counts"]["num_info_values_dropped"] == 0


def test_only_values_of_wire_types_cross_from_a_sub_env_process():
    info = {"a": 1, "b": 2.5, "c": "text", "d": True, "e": None, "f": np.arange(3), "g": np.float32(1.5),
            "h": [1, {"x": 2}], "obj": object(), "bad_list": [1, object()], 3: "int key",
            "s": np.array(["a"]), "deep": {"k": {"k": {"k": {"k": {"k": 1}}}}}}
    kept, dropped = wire_info(info)
    assert set(kept) == {"a", "b", "c", "d", "e", "f", "g", "h"} and kept["g"] == 1.5
    assert dropped == 5  # obj, bad_list, the int key, the string array, the too-deep dict
    assert wire_info(None) == ({}, 0) and wire_info("not a dict") == ({}, 1)


def test_a_raising_hook_drops_that_episodes_values_is_logged_once_and_sampling_goes_on(caplog):
    runner = _runner("ftrl.testing.callbacks:Raising", frag=200)
    try:
        with caplog.at_level(logging.ERROR, logger="ftrl.rl.callbacks"):
            results = [runner.sample() for _ in range(2)]
    finally:
        runner.stop()
    kept = np.concatenate([r["episodes"]["custom"]["kept"] for r in results])
    errors = sum(r["callback_counts"]["num_callback_errors"] for r in results)
    assert errors > 5 and int(np.isnan(kept).sum()) == errors and np.nansum(kept) == len(kept) - errors
    logged = [r for r in caplog.records if "Raising.on_episode_end raised" in r.getMessage()]
    assert len(logged) == 1 and "env runner 1" in logged[0].getMessage()


def test_an_episode_cut_by_a_sub_env_failure_gets_no_end_hook_and_no_values():
    runner = _runner(f"{__name__}:Counting", env="ftrl.testing.envs:make_flaky_env",
                     env_config={"fail_every": 37, "max_episode_steps": 60}, frag=200, restart=True)
    try:
        results = [runner.sample() for _ in range(2)]
        cb = runner._callbacks.callbacks
        restarts = runner.num_sub_env_restarts
    finally:
        runner.stop()
    returns = np.concatenate([r["episodes"]["returns"] for r in results])
    assert restarts > 5 and cb.calls["end"] == len(returns)
    assert cb.calls["start"] == cb.calls["end"] + restarts + 4  # a restarted sub-env starts a new episode
    assert not np.isnan(np.concatenate([r["episodes"]["custom"]["ret"] for r in results])).any()


def test_evaluation_episodes_carry_their_values_too():
    runner = _runner(f"{__name__}:Counting")
    try:
        out = runner.evaluate(num_episodes=5)
    finally:
        runner.stop()
    assert len(out["returns"]) == 5 and len(out["custom"]["ret"]) == 5
    np.testing.assert_allclose(out["custom"]["ret"], out["returns"])
    assert not math.isnan(float(out["custom"]["len"].sum()))
