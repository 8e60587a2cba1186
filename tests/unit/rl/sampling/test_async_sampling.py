"""Weights pushed while a runner samples wait in its inbox: the push never waits for the
fragment, and the runner acts with them from its next vector step (the fragment reports
its first step's version and its steps' mean). Several fragments to a reply sit side by
side and follow on in time."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ftrl.config import APPOConfig
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.weights_inbox import WeightsInbox
from ftrl.wire.errors import InvalidArgumentError


def test_the_inbox_keeps_the_last_push_once():
    inbox = WeightsInbox()
    assert inbox.take() is None
    inbox.put(5, np.ones(2, np.float32), None)
    inbox.put(4, np.zeros(2, np.float32), {"kind": "NoFilter"})  # a restored driver's: the last push wins
    version, weights, filter_state = inbox.take()
    assert version == 4 and weights.tolist() == [0.0, 0.0] and filter_state == {"kind": "NoFilter"}
    assert inbox.take() is None


def test_the_inbox_hands_weights_between_steps_and_keeps_the_filter_for_the_next_fragment():
    inbox = WeightsInbox()
    assert not inbox.has_weights and inbox.take_weights() is None
    inbox.put(3, np.ones(2, np.float32), {"kind": "MeanStdFilter"})
    assert inbox.has_weights
    version, weights = inbox.take_weights()
    assert version == 3 and weights.tolist() == [1.0, 1.0] and not inbox.has_weights
    assert inbox.take() == (3, None, {"kind": "MeanStdFilter"})  # the filter: at the fragment's end
    inbox.put(4, np.zeros(2, np.float32), None)
    assert inbox.take_weights()[0] == 4 and inbox.take() is None


def test_weights_pushed_mid_fragment_act_from_the_next_step():
    """A runner samples 60 slow steps; weights pushed meanwhile choose the actions from the
    next vector step on (all-zero weights: every logp is log 1/2, which the first weights'
    are not); the fragment reports its first version and the mean of its steps'."""
    cfg = (APPOConfig().environment("ftrl.testing.envs:make_slow_env", env_config={"sleep_s": 0.01})
           .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=60).debugging(seed=0))
    runner = EnvRunner(cfg, set_torch_threads=False)
    try:
        version, weights = runner.get_weights()
        results, steps_before = [], runner._vec_steps
        sampler = threading.Thread(target=lambda: results.append(runner.sample()))
        sampler.start()
        deadline = time.monotonic() + 10
        while runner._vec_steps < steps_before + 10 and time.monotonic() < deadline:  # 10 of the 60 steps
            time.sleep(0.001)
        assert runner.set_weights(version + 1, np.zeros_like(weights))["waiting"]
        sampler.join(10)
        result = results[0]
        uniform = np.isclose(result["batch"]["logp"][:, 0], np.log(0.5), atol=1e-6)
        switch = int(np.argmax(uniform))
        assert 0 < switch < 60 and uniform[switch:].all() and not uniform[:switch].any()
        assert result["weights_version"] == version
        assert result["weights_version_mean"] == pytest.approx(version + (60 - switch) / 60)
        assert runner.weights_version == version + 1
    finally:
        runner.stop()


def test_a_push_to_a_busy_runner_returns_at_once_and_the_next_fragment_uses_it():
    cfg = (APPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2, rollout_fragment_length=8)
           .debugging(seed=0))
    runner = EnvRunner(cfg, set_torch_threads=False)
    try:
        version, weights = runner.get_weights()
        new = (weights + 0.5).astype(np.float32)
        held, release = threading.Event(), threading.Event()

        def busy():  # as a fragment being sampled: the runner's lock held
            with runner._lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=busy)
        holder.start()
        assert held.wait(5)
        t0 = time.monotonic()
        reply = runner.set_weights(version + 1, new)
        assert time.monotonic() - t0 < 1.0 and reply == {"weights_version": version + 1, "waiting": True}
        assert runner.weights_version == version  # not loaded yet: the lock is someone else's
        release.set()
        holder.join(5)
        result = runner.sample()
        assert result["weights_version"] == version + 1
        np.testing.assert_array_equal(runner.get_weights()[1], new)
        assert runner.set_weights(version + 2, weights) == {"weights_version": version + 2}  # idle: loaded at once
        assert runner.get_weights()[0] == version + 2
    finally:
        runner.stop()


def test_several_fragments_to_a_reply_sit_side_by_side_and_follow_on_in_time():
    cfg = (APPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2, rollout_fragment_length=8)
           .debugging(seed=1))
    runner = EnvRunner(cfg, set_torch_threads=False)
    try:
        result = runner.sample(fragments=3)
        batch = result["batch"]
        assert batch["obs"].shape == (8, 6, 4) and batch["last_values"].shape == (6,)
        assert result["env_steps"] == 8 * 2 * 3
        for k in range(2):  # sub-env e's columns e, 2 + e, 4 + e: one run of 24 steps
            first, second = slice(2 * k, 2 * k + 2), slice(2 * k + 2, 2 * k + 4)
            # the next fragment starts where this one stopped: same episodes unless one ended
            ended = batch["terminateds"][-1, first] | batch["truncateds"][-1, first]
            same = batch["episode_ids"][-1, first] == batch["episode_ids"][0, second]
            assert np.array_equal(same, ~ended)
            # the bootstrap value of a column is the value of the next one's first step
            np.testing.assert_allclose(batch["last_values"][first], batch["values"][0, second], rtol=1e-6)
        for bad in (0, 5000, 1.5, True):
            with pytest.raises(InvalidArgumentError, match="fragments"):
                runner.sample(fragments=bad)
    finally:
        runner.stop()


def test_fragments_to_a_reply_of_a_recurrent_policy_note_each_column_s_start():
    cfg = (APPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2, rollout_fragment_length=8)
           .training(model={"use_lstm": True, "lstm_cell_size": 4}).debugging(seed=1))
    runner = EnvRunner(cfg, set_torch_threads=False)
    try:
        batch = runner.sample(fragments=2)["batch"]
        assert batch["state_in"].shape[:1] == (4,) and batch["obs"].shape[:2] == (8, 4)
        assert not np.array_equal(batch["state_in"][2:, 0], batch["state_in"][:2, 0])  # the state went on
    finally:
        runner.stop()
