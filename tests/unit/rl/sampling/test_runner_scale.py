"""EnvRunnerGroup.scale at runtime over in-process actors: new runners join with the
latest weights before they sample, scaled-away runners' in-flight samples are used or
dropped and counted before they are killed, and 0 runners is refused."""

from __future__ import annotations

import time

import pytest

from ftrl.wire.errors import ConfigError
from tests.local_client import LocalClient
from tests.unit.rl.driver.test_algorithm import _config as _algo_config
from tests.unit.rl.sampling.test_runner_group import _config, _group, _until, _weights


def _states(client) -> dict[str, str]:
    return {a["name"]: a["state"] for a in client.actors()}


def test_grown_runners_get_the_latest_weights_before_they_sample():
    with LocalClient() as client:
        group = _group(client, _config(n=2))
        group.sync_weights(3, _weights())
        group.sample(32)
        group.scale(4)
        assert group.target == 4 and group.num_runners == 2  # applied at the boundary only
        done = group.apply_scale()
        assert done["added"] == ["t/env_runner/2", "t/env_runner/3"] and group.num_runners == 4
        _until(lambda: (group.poll_recoveries(), group.num_healthy == 4)[1])
        for name in ("t/env_runner/2", "t/env_runner/3"):
            assert client.get_actor(name).call("ping")["weights_version"] == 3
        round_ = group.sample(64)
        assert sorted(r["worker_index"] for r in round_.results) == [1, 2, 3, 4]
        assert all(r["weights_version"] == 3 and not r["dropped"] for r in round_.results)
        assert group.num_env_runner_restarts == 0  # joining is no restart
        assert group.apply_scale() is None  # nothing more to do
        group.stop()


def test_shrunk_runners_finish_their_sample_it_is_counted_then_they_are_killed():
    with LocalClient() as client:
        group = _group(client, _config(n=3, sample_timeout_s=0.3))
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/2", 0.6)
        round_ = group.sample(32)  # runner 2 is late: its request stays in flight
        assert round_.env_steps == 32 and group.in_flight() == 1
        group.sync_weights(1, _weights())  # the next iteration's weights
        group.scale(1)
        done = group.apply_scale()
        assert done["retired"] == ["t/env_runner/1", "t/env_runner/2"] and group.num_runners == 1
        states = _states(client)
        assert states["t/env_runner/1"] == "DEAD"  # idle: killed at once
        assert states["t/env_runner/2"] == "ALIVE"  # finishing its sample
        assert group.in_flight() == 1
        time.sleep(0.8)
        dropped_before = group.env_steps_dropped
        round_ = group.sample(16)
        late = [r for r in round_.results if r["worker_index"] == 3]
        assert len(late) == 1 and late[0]["dropped"]  # sampled with version 0: stale
        assert group.env_steps_dropped == dropped_before + late[0]["env_steps"] > dropped_before
        assert _states(client)["t/env_runner/2"] == "DEAD" and group.in_flight() == 0
        assert sorted({r["worker_index"] for r in round_.results if not r["dropped"]}) == [1]
        group.stop()


def test_a_fresh_sample_of_a_scaled_away_runner_is_used():
    with LocalClient() as client:
        cfg = _config(n=2, sample_timeout_s=0.3)
        cfg.env_runners(max_weights_lag=2)
        group = _group(client, cfg)
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/1", 0.6)
        group.sample(16)
        group.scale(1)
        group.apply_scale()
        time.sleep(0.8)
        round_ = group.sample(32)
        used = [r for r in round_.results if r["worker_index"] == 2]
        assert len(used) == 1 and not used[0]["dropped"] and group.env_steps_dropped == 0
        assert _states(client)["t/env_runner/1"] == "DEAD"
        group.stop()


def test_a_retiring_runner_that_never_answers_is_lost_and_killed():
    with LocalClient() as client:
        group = _group(client, _config(n=2, sample_timeout_s=0.2))
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/1", 5.0)
        group.sample(16)
        group.scale(1)
        group.apply_scale()
        time.sleep(0.3)  # past its deadline (one sample timeout)
        group.sample(16)
        assert group.num_samples_lost == 1 and group.in_flight() == 0
        assert _states(client)["t/env_runner/1"] == "DEAD"
        group.stop()


def test_growing_then_shrinking_at_once_leaves_no_runner_behind():
    with LocalClient() as client:
        group = _group(client, _config(n=1))
        group.sync_weights(0, _weights())
        group.scale(3)
        group.apply_scale()
        group.scale(1)
        group.apply_scale()
        # training goes on meanwhile: each round also ends the runners that left
        _until(lambda: (group.sample(16), all(state == "DEAD" for name, state in _states(client).items()
                                              if name != "t/env_runner/0"))[1])
        assert group.num_runners == 1 and len(group.slots) == 1
        group.sample(16)
        group.stop()
        assert set(_states(client).values()) == {"DEAD"}


def test_a_name_still_leaving_is_added_back_once_it_is_gone():
    with LocalClient() as client:
        group = _group(client, _config(n=2, sample_timeout_s=0.3))
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/1", 0.6)
        group.sample(16)  # runner 1's sample stays in flight
        group.scale(1)
        group.apply_scale()
        group.scale(3)
        assert group.apply_scale() is None  # t/env_runner/1 is still finishing its sample
        assert len(group.slots) == 1
        client.delay_calls("t/env_runner/1", 0.0)
        time.sleep(0.7)
        group.sample(16)  # collects it, kills it
        assert _states(client)["t/env_runner/1"] == "DEAD"
        done = group.apply_scale()
        assert done["added"] == ["t/env_runner/1", "t/env_runner/2"]
        _until(lambda: (group.poll_recoveries(), group.num_healthy == 3)[1])
        assert _states(client) == dict.fromkeys(
            ("t/env_runner/0", "t/env_runner/1", "t/env_runner/2"), "ALIVE")
        assert group.num_env_runner_restarts == 0
        group.stop()


def test_zero_runners_is_refused_at_runtime():
    with LocalClient() as client:
        group = _group(client, _config(n=2))
        with pytest.raises(ConfigError, match="at least one"):
            group.scale(0)
        assert group.target == 2
        group.stop()
    algo = _algo_config(n=0).build()
    try:
        algo.scale_env_runners(0)  # already so: nothing to do
        with pytest.raises(ConfigError, match="num_env_runners=0"):
            algo.scale_env_runners(2)
    finally:
        algo.stop()


def test_algorithm_scales_runners_between_iterations(tmp_path):
    with LocalClient() as client:
        algo = _algo_config(n=1).build(client=client, output_dir=tmp_path, job_name="job")
        assert algo.train()["num_env_runners"] == 1
        algo.scale_env_runners(3)
        result = algo.train()
        assert result["num_env_runners"] == 3
        _until(lambda: algo.train()["num_healthy_env_runners"] == 3, timeout=30)
        algo.scale_env_runners(2)
        result = algo.train()
        assert result["num_env_runners"] == 2 and result["num_healthy_env_runners"] == 2
        _until(lambda: _states(client).get("job/env_runner/2") == "DEAD")
        algo.stop()
