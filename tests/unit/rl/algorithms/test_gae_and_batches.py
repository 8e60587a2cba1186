"""GAE across terminations, time-limit truncations and fragment ends; schedules; batches."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl.rl.algorithms.ppo import compute_gae
from ftrl.rl.learning.learner import scheduled
from ftrl.rl.sample_batch import check_fragment, concat, flatten_fragment


def _fragment(rewards, values, term, trunc, tvals, last):
    rewards = np.asarray(rewards, np.float32)[:, None]
    t = rewards.shape[0]
    return {
        "rewards": rewards,
        "values": np.asarray(values, np.float32)[:, None],
        "terminateds": np.asarray(term, bool)[:, None],
        "truncateds": np.asarray(trunc, bool)[:, None],
        "trunc_values": np.asarray(tvals, np.float32)[:, None],
        "last_values": np.asarray([last], np.float32),
        "obs": np.zeros((t, 1, 2), np.float32),
        "actions": np.zeros((t, 1), np.int64),
        "logp": np.zeros((t, 1), np.float32),
        "valid": np.ones((t, 1), bool),
        "episode_ids": np.zeros((t, 1), np.int64),
    }


def _reference_gae(rewards, values, term, trunc, tvals, last, gamma, lam):
    """Straightforward per-step GAE written independently of the implementation."""
    n = len(rewards)
    adv = [0.0] * n
    nxt_adv = 0.0
    for t in reversed(range(n)):
        if term[t]:
            nv, cont = 0.0, 0.0
        elif trunc[t]:
            nv, cont = tvals[t], 0.0
        else:
            nv, cont = (values[t + 1] if t + 1 < n else last), 1.0
        delta = rewards[t] + gamma * nv - values[t]
        nxt_adv = delta + gamma * lam * cont * nxt_adv
        adv[t] = nxt_adv
    return np.array(adv, np.float32)


def test_gae_matches_reference_with_terminal_truncation_and_bootstrap():
    rewards = [1.0, 1.0, 1.0, 0.5, 1.0, 2.0]
    values = [0.5, 0.4, 0.3, 0.2, 0.1, 0.7]
    term = [False, True, False, False, False, False]
    trunc = [False, False, False, True, False, False]
    tvals = [0.0, 0.0, 0.0, 3.0, 0.0, 0.0]
    last = 1.5
    frag = _fragment(rewards, values, term, trunc, tvals, last)
    adv, ret = compute_gae(frag, gamma=0.9, lam=0.8)
    ref = _reference_gae(rewards, values, term, trunc, tvals, last, 0.9, 0.8)
    np.testing.assert_allclose(adv[:, 0], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret[:, 0], ref + np.asarray(values, np.float32), rtol=1e-5)
    # terminal step: no bootstrap at all
    assert adv[1, 0] == pytest.approx(1.0 - 0.4)
    # truncated step: bootstraps from V(final obs), not from the next row (a new episode)
    assert adv[3, 0] == pytest.approx(0.5 + 0.9 * 3.0 - 0.2)


def test_gae_lambda_one_gives_discounted_returns_minus_values():
    rewards = [1.0, 2.0, 3.0]
    values = [0.0, 0.0, 0.0]
    frag = _fragment(rewards, values, [False] * 3, [False] * 3, [0.0] * 3, last=10.0)
    adv, _ = compute_gae(frag, gamma=0.5, lam=1.0)
    assert adv[0, 0] == pytest.approx(1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 10)


def test_schedule_interpolates_and_holds():
    sched = [[0, 1.0], [100, 0.0]]
    assert scheduled(5.0, None, 50) == 5.0
    assert scheduled(5.0, sched, 0) == 1.0
    assert scheduled(5.0, sched, 25) == pytest.approx(0.75)
    assert scheduled(5.0, sched, 1000) == 0.0
    assert scheduled(5.0, [[10, 2.0]], 0) == 2.0


def test_flatten_concat_and_check():
    frag = _fragment([1, 2, 3], [0, 0, 0], [False] * 3, [False] * 3, [0] * 3, 0.0)
    check_fragment(frag)
    flat = flatten_fragment(frag)
    assert flat["obs"].shape == (3, 2) and "last_values" not in flat
    both = concat([flat, flat])
    assert both["rewards"].shape == (6,)
    bad = dict(frag)
    bad["values"] = np.zeros((2, 1), np.float32)
    with pytest.raises(ValueError, match="values"):
        check_fragment(bad)
    del bad["values"]
    with pytest.raises(ValueError, match="missing"):
        check_fragment(bad)
