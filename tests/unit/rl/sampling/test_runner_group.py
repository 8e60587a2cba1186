"""EnvRunnerGroup policy over in-process actors: recovery with resync, late and dropped
samples, ignore/fail modes, validation and the no-healthy-runner tolerance."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.models.actor_critic import ActorCritic
from ftrl.rl.sampling.runner_group import EnvRunnerFailureError, EnvRunnerGroup
from ftrl.rl.spaces import space_spec
from tests.local_client import LocalClient

SPEC = space_spec(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def _config(**ft):
    cfg = (
        PPOConfig()
        .environment(ft.pop("env", "CartPole-v1"), env_config=ft.pop("env_config", {}))
        .env_runners(
            num_env_runners=ft.pop("n", 2),
            num_envs_per_env_runner=2,
            rollout_fragment_length=8,
            sample_timeout_s=ft.pop("sample_timeout_s", 10.0),
            env_runner_health_probe_timeout_s=ft.pop("probe", 5.0),
            validate_env_runners_after_construction=ft.pop("validate", True),
        )
        .fault_tolerance(**ft)
        .debugging(seed=0)
    )
    return cfg


def _weights() -> np.ndarray:
    return ActorCritic(SPEC).get_flat()


def _group(client, cfg) -> EnvRunnerGroup:
    group = EnvRunnerGroup(client, cfg, job_name="t", space_spec=SPEC.to_dict())
    group.start()
    return group


def _until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def test_sample_round_collects_from_every_runner():
    with LocalClient() as client:
        group = _group(client, _config())
        assert group.num_healthy == 2
        group.sync_weights(0, _weights())
        round_ = group.sample(32)
        assert round_.env_steps == 32
        assert sorted(r["worker_index"] for r in round_.results) == [1, 2]
        assert all(r["weights_version"] == 0 and not r["dropped"] for r in round_.results)
        group.stop()
        assert {a["state"] for a in client.actors()} == {"DEAD"}


def test_a_round_lists_its_fragments_in_runner_order_whatever_order_they_came_back():
    """The learner's sums depend on the batch's order: the same seed must give the same
    batch however the runners' timing falls."""
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/0", 0.3)  # the first runner (worker_index 1) answers last
        round_ = group.sample(32)
        assert [r["worker_index"] for r in round_.results] == [1, 2]
        client.delay_calls("t/env_runner/0", 0.0)
        client.delay_calls("t/env_runner/1", 0.3)
        round_ = group.sample(32)
        assert [r["worker_index"] for r in round_.results] == [1, 2]
        group.stop()


def test_restarted_runner_is_resynced_before_it_samples_again():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        group.sample(32)
        client.crash_actor("t/env_runner/1")
        group.sync_weights(1, _weights())  # fails on the restarted runner: recovery starts
        round_ = group.sample(16)
        assert round_.env_steps >= 16
        _until(lambda: (group.poll_recoveries(), group.num_healthy == 2)[1])
        handle = group.slots[1].handle
        # resynced to the latest version (not the random init of the new process)
        assert handle.call("ping")["weights_version"] == 1
        results = group.sample(32).results
        assert {r["weights_version"] for r in results} == {1}
        assert group.num_env_runner_restarts == 1
        assert group.num_samples_dropped == 0
        assert group.stats()["num_env_runner_failures"] >= 1


def test_restarted_runner_gets_the_central_filter_state():
    from ftrl.rl.sampling.filters import MeanStdFilter

    central = MeanStdFilter((4,))
    central(np.random.default_rng(0).normal(size=(100, 4)))
    cfg = _config()
    cfg.env_runners(observation_filter="MeanStdFilter")
    with LocalClient() as client:
        group = _group(client, cfg)
        group.sync_weights(3, _weights(), central.get_state())
        client.crash_actor("t/env_runner/0")
        group.sample(16)  # notices the failure, starts the recovery
        _until(lambda: (group.poll_recoveries(), group.num_healthy == 2)[1])
        state = group.slots[0].handle.call("get_filter_state")
        assert state["stats"]["n"] == 100
        np.testing.assert_allclose(state["stats"]["mean"], central.stats.mean)
        assert group.slots[0].handle.call("ping")["weights_version"] == 3


def test_runner_dying_mid_sample_is_counted_as_lost_and_recovered():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/0", 0.5)
        fut_round = None

        import threading

        def crash_soon():
            time.sleep(0.15)
            client.crash_actor("t/env_runner/0")

        threading.Thread(target=crash_soon).start()
        fut_round = group.sample(32)
        # the dead runner's share is sampled at once by the runner already back, in the same round
        assert fut_round.env_steps == 32
        assert [r["worker_index"] for r in fut_round.results] == [2, 2]
        assert group.num_samples_lost == 1
        _until(lambda: (group.poll_recoveries(), group.num_healthy == 2)[1])


def test_a_top_up_round_asks_only_as_many_runners_as_the_missing_steps_need():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        full = group.sample(32)
        assert sorted(r["worker_index"] for r in full.results) == [1, 2]  # every runner, as RLlib
        short = group.sample(10, top_up=True)
        assert [r["worker_index"] for r in short.results] == [1]  # one fragment (16 steps) is enough
        assert short.env_steps == 16


def test_slow_runner_never_stalls_past_the_timeout_and_late_samples_are_counted():
    with LocalClient() as client:
        group = _group(client, _config(sample_timeout_s=0.3))
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/1", 1.0)
        t0 = time.monotonic()
        round_ = group.sample(32)
        assert time.monotonic() - t0 < 0.9
        assert round_.env_steps == 16
        assert group.num_samples_late == 1
        client.delay_calls("t/env_runner/1", 0.0)
        group.sync_weights(1, _weights())  # the late runner is busy: synced after it returns
        time.sleep(1.0)
        round_ = group.sample(16)
        # the late fragment (sampled with version 0) came back and was dropped, counted
        assert group.num_samples_dropped == 1 and group.env_steps_dropped == 16
        dropped = [r for r in round_.results if r["dropped"]]
        assert len(dropped) == 1 and dropped[0]["late"]
        round_ = group.sample(32)
        assert round_.env_steps == 32


def test_ignore_mode_goes_on_with_fewer_then_fails_when_none_is_left():
    with LocalClient() as client:
        group = _group(client, _config(ignore_env_runner_failures=True))
        assert group.max_restarts == 0
        group.sync_weights(0, _weights())
        client.crash_actor("t/env_runner/0")  # no restarts: DEAD
        round_ = group.sample(32)
        assert round_.env_steps == 32  # the survivor sampled the dropped runner's share too
        assert [r["worker_index"] for r in round_.results] == [2, 2]
        assert [s.state for s in group.slots] == ["removed", "healthy"]
        client.crash_actor("t/env_runner/1")
        with pytest.raises(EnvRunnerFailureError, match="nothing left"):
            group.sample(16)


def test_without_fault_tolerance_a_runner_failure_raises():
    with LocalClient() as client:
        group = _group(client, _config(restart_failed_env_runners=False))
        group.sync_weights(0, _weights())
        client.crash_actor("t/env_runner/0")
        with pytest.raises(EnvRunnerFailureError, match="t/env_runner/0"):
            group.sample(32)


def test_user_error_in_a_runner_soft_restarts_it():
    cfg = _config(env="ftrl.testing.envs:make_flaky_env", env_config={"fail_every": 20})
    with LocalClient() as client:
        group = _group(client, cfg)
        group.sync_weights(0, _weights())
        for _ in range(3):
            group.sample(32)
            group.wait_for_healthy()
        _until(lambda: (group.poll_recoveries(), group.num_healthy == 2)[1])
        assert group.num_env_runner_failures >= 2
        assert group.num_env_runner_restarts >= 2  # envs rebuilt in place (no new process)
        assert all(s.incarnation == 1 for s in group.slots)


def test_validation_reports_broken_runners():
    broken = "ftrl.testing.envs:make_broken_env"
    with LocalClient() as client:
        with pytest.raises(EnvRunnerFailureError, match="on purpose"):
            _group(client, _config(env=broken))


def test_no_healthy_runner_waits_up_to_the_tolerance_then_raises():
    broken = "ftrl.testing.envs:make_broken_env"
    cfg = _config(env=broken, validate=False, probe=0.05, num_consecutive_env_runner_failures_tolerance=3)
    with LocalClient() as client:
        group = _group(client, cfg)
        assert group.num_healthy == 0
        with pytest.raises(EnvRunnerFailureError, match=r"on purpose|no healthy"):
            group.wait_for_healthy()


def test_all_runners_restarting_too_long_raises_after_the_tolerance():
    cfg = _config(probe=0.05, env_runner_restore_timeout_s=0.05, num_consecutive_env_runner_failures_tolerance=3)
    with LocalClient(restart_delay_s=30.0) as client:  # restarts that take "forever"
        group = _group(client, cfg)
        group.sync_weights(0, _weights())
        client.crash_actor("t/env_runner/0")
        client.crash_actor("t/env_runner/1")
        assert group.sample(32).env_steps == 0  # nothing to wait for: returns at once
        t0 = time.monotonic()
        with pytest.raises(EnvRunnerFailureError, match="num_consecutive_env_runner_failures_tolerance=3"):
            group.wait_for_healthy()
        assert time.monotonic() - t0 < 10
