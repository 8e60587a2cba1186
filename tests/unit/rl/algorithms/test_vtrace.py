"""V-trace against the paper's sum, computed by brute force, and its on-policy reduction
to n-step returns (arXiv 1802.01561, section 4.1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ftrl.rl.algorithms.impala import vtrace


def _brute_force(mu_logp, pi_logp, rewards, values, bootstrap, gamma, rho_bar, c_bar, pg_rho_bar):
    """v_s = V(x_s) + sum_{t=s}^{T-1} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t, one column,
    no episode end inside; the advantage uses v_{s+1} (bootstrap past the end)."""
    t_len = len(rewards)
    ratio = np.exp(pi_logp - mu_logp)
    rho = np.minimum(rho_bar, ratio)
    c = np.minimum(c_bar, ratio)
    next_v = np.append(values[1:], bootstrap)
    delta = rho * (rewards + gamma * next_v - values)
    vs = np.zeros(t_len)
    for s in range(t_len):
        total = 0.0
        for t in range(s, t_len):
            total += gamma ** (t - s) * np.prod(c[s:t]) * delta[t]
        vs[s] = values[s] + total
    vs_next = np.append(vs[1:], bootstrap)
    adv = np.minimum(pg_rho_bar, ratio) * (rewards + gamma * vs_next - values)
    return vs, adv


def _columns(rng, t_len, width):
    mu = np.log(rng.uniform(0.05, 1.0, (t_len, width)))
    pi = np.log(rng.uniform(0.05, 1.0, (t_len, width)))
    rewards = rng.normal(size=(t_len, width))
    values = rng.normal(size=(t_len, width))
    bootstrap = rng.normal(size=width)
    return mu, pi, rewards, values, bootstrap


def _run(mu, pi, rewards, values, next_values, discounts, continues, **clips):
    as_t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    vs, adv = vtrace(as_t(mu), as_t(pi), as_t(rewards), as_t(values), as_t(next_values), as_t(discounts),
                     torch.as_tensor(continues), **clips)
    return vs.numpy(), adv.numpy()


@pytest.mark.parametrize("rho_bar, c_bar, pg_rho_bar", [(1.0, 1.0, 1.0), (0.5, 0.9, 2.0), (100.0, 100.0, 100.0)])
def test_vtrace_equals_the_papers_sum(rho_bar, c_bar, pg_rho_bar):
    rng = np.random.default_rng(0)
    t_len, width, gamma = 7, 5, 0.9
    mu, pi, rewards, values, bootstrap = _columns(rng, t_len, width)
    next_values = np.concatenate([values[1:], bootstrap[None]])
    continues = np.ones((t_len, width), bool)
    continues[-1] = False
    vs, adv = _run(mu, pi, rewards, values, next_values, np.full((t_len, width), gamma), continues,
                   clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar)
    for col in range(width):
        want_vs, want_adv = _brute_force(mu[:, col], pi[:, col], rewards[:, col], values[:, col], bootstrap[col],
                                         gamma, rho_bar, c_bar, pg_rho_bar)
        np.testing.assert_allclose(vs[:, col], want_vs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(adv[:, col], want_adv, rtol=1e-5, atol=1e-5)


def test_on_policy_vtrace_is_the_n_step_return():
    rng = np.random.default_rng(1)
    t_len, width, gamma = 9, 3, 0.97
    _, logp, rewards, values, bootstrap = _columns(rng, t_len, width)
    next_values = np.concatenate([values[1:], bootstrap[None]])
    continues = np.ones((t_len, width), bool)
    continues[-1] = False
    vs, adv = _run(logp, logp, rewards, values, next_values, np.full((t_len, width), gamma), continues)
    for s in range(t_len):
        n = t_len - s
        ret = sum(gamma**k * rewards[s + k] for k in range(n)) + gamma**n * bootstrap
        np.testing.assert_allclose(vs[s], ret, rtol=1e-5, atol=1e-5)
        next_vs = vs[s + 1] if s + 1 < t_len else bootstrap
        np.testing.assert_allclose(adv[s], rewards[s] + gamma * next_vs - values[s], rtol=1e-5, atol=1e-5)


def test_traces_stop_at_episode_ends_and_cuts_bootstrap_from_the_final_value():
    """A terminal step ends the sum with 0; a time-limit cut ends it with V(final obs);
    the rows after either belong to the next episode and do not flow back."""
    rng = np.random.default_rng(2)
    t_len, gamma = 8, 0.95
    mu, pi, rewards, values, bootstrap = _columns(rng, t_len, 1)
    term = np.zeros((t_len, 1), bool)
    trunc = np.zeros((t_len, 1), bool)
    term[2] = True  # episode A: rows 0-2, terminated
    trunc[5] = True  # episode B: rows 3-5, cut by a time limit
    final_value = 0.7  # V(final obs of B)
    next_values = np.concatenate([values[1:], bootstrap[None]])
    next_values[5] = final_value
    discounts = np.where(term, 0.0, gamma)
    continues = ~(term | trunc)
    continues[-1] = False
    vs, adv = _run(mu, pi, rewards, values, next_values, discounts, continues)
    pieces = [(0, 3, 0.0, 0.0), (3, 6, final_value, gamma), (6, 8, bootstrap[0], gamma)]
    for lo, hi, boot, last_discount in pieces:
        # a piece is a fragment of its own whose bootstrap is `boot` (0 after a terminal)
        sl = slice(lo, hi)
        want_vs, want_adv = _brute_force(mu[sl, 0], pi[sl, 0], rewards[sl, 0], values[sl, 0], boot,
                                         gamma, 1.0, 1.0, 1.0)
        if last_discount == 0.0:  # the terminal step: the paper's sum with gamma_T = 0
            want_vs, want_adv = _brute_force_terminal(mu[sl, 0], pi[sl, 0], rewards[sl, 0], values[sl, 0], gamma)
        np.testing.assert_allclose(vs[sl, 0], want_vs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(adv[sl, 0], want_adv, rtol=1e-5, atol=1e-5)


def _brute_force_terminal(mu, pi, rewards, values, gamma):
    """The sum over an episode that terminates at its last row (V after it is 0, and the
    last step is not discounted into anything)."""
    t_len = len(rewards)
    ratio = np.exp(pi - mu)
    rho = np.minimum(1.0, ratio)
    c = np.minimum(1.0, ratio)
    next_v = np.append(values[1:], 0.0)
    disc = np.full(t_len, gamma)
    disc[-1] = 0.0
    delta = rho * (rewards + disc * next_v - values)
    vs = np.array([values[s] + sum(gamma ** (t - s) * np.prod(c[s:t]) * delta[t] for t in range(s, t_len))
                   for s in range(t_len)])
    vs_next = np.append(vs[1:], 0.0)
    return vs, np.minimum(1.0, ratio) * (rewards + disc * vs_next - values)
