"""Sampling ahead by RPC (`ftrl.rl.sampling.sample_ahead`): one fragment ahead of the next
call, for the same arguments; an error sampled ahead is the next call's; a real runner's
fragments sampled ahead follow on in time."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ftrl.config import APPOConfig
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.sample_ahead import AheadSampler


class _Counting:
    """A stand-in for `EnvRunner.sample`: numbered results, the thread each ran on."""

    def __init__(self, fail_at: int | None = None):
        self.calls: list[tuple[dict, str]] = []
        self.fail_at = fail_at
        self.done = threading.Event()

    def __call__(self, **kwargs):
        self.calls.append((kwargs, threading.current_thread().name))
        self.done.set()
        if len(self.calls) == self.fail_at:
            raise RuntimeError(f"sample {self.fail_at} failed")
        return {"n": len(self.calls), **kwargs}


def _wait(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert predicate()


def test_each_call_gets_the_fragment_sampled_ahead_and_starts_the_next():
    sample = _Counting()
    ahead = AheadSampler(sample, "r1")
    try:
        assert ahead.next({"fragments": 2}) == {"n": 1, "fragments": 2}  # none ahead: sampled now
        _wait(lambda: len(sample.calls) == 2)  # and the next one, ahead, on a thread of its own
        assert sample.calls[0][1] == threading.current_thread().name and sample.calls[1][1].startswith("r1-ahead")
        assert ahead.next({"fragments": 2}) == {"n": 2, "fragments": 2}
        _wait(lambda: len(sample.calls) == 3)
        time.sleep(0.05)
        assert len(sample.calls) == 3  # one ahead at most
        # other arguments: the fragment ahead is dropped, one is sampled for them now
        assert ahead.next({"fragments": 1}) == {"n": 4, "fragments": 1}
    finally:
        ahead.close()


def test_an_error_sampled_ahead_is_the_next_call_s_and_nothing_is_sampled_after_it():
    sample = _Counting(fail_at=2)
    ahead = AheadSampler(sample, "r1")
    try:
        assert ahead.next({})["n"] == 1
        _wait(lambda: len(sample.calls) == 2)
        with pytest.raises(RuntimeError, match="sample 2 failed"):
            ahead.next({})
        time.sleep(0.05)
        assert len(sample.calls) == 2
        assert ahead.next({})["n"] == 3  # the call after: sampled now again
    finally:
        ahead.close()


def test_a_runner_s_fragments_sampled_ahead_follow_on_in_time():
    cfg = (APPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2, rollout_fragment_length=16)
           .debugging(seed=0))
    runner = EnvRunner(cfg, set_torch_threads=False)
    try:
        first = runner.sample_ahead()
        _wait(lambda: runner.num_samples == 2)
        second = runner.sample_ahead()
        assert runner.num_samples >= 2 and second["env_steps"] == 32
        a, b = first["batch"], second["batch"]
        # the second fragment starts where the first ended: its first step's episode ids
        # are the first's last ones, except where an episode ended at that last step
        ended = a["terminateds"][-1] | a["truncateds"][-1]
        assert np.array_equal(b["episode_ids"][0][~ended], a["episode_ids"][-1][~ended])
        assert np.allclose(a["last_values"], b["values"][0])  # the bootstrap value is the next step's value
    finally:
        runner.stop()
