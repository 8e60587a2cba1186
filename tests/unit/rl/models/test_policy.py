"""The numpy inference policy computes what the torch model computes, from the same
flat weights; runners on it never import torch."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from ftrl.config import ModelConfig
from ftrl.rl.models.actor_critic import ActorCritic
from ftrl.rl.models.policy import NumpyPolicy, TorchPolicy, flat_layout
from ftrl.rl.spaces import space_spec

OBS = gym.spaces.Box(-1, 1, (5,), np.float32)


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)])
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_numpy_matches_torch(action_space, share, activation):
    torch.manual_seed(0)
    spec = space_spec(OBS, action_space)
    model_cfg = ModelConfig(fcnet_hiddens=[16, 8], vf_share_layers=share, fcnet_activation=activation, init_log_std=-0.5)
    torch_model = ActorCritic(spec, model_cfg)
    flat = torch_model.get_flat()
    assert flat.size == sum(int(np.prod(s)) for _, s in flat_layout(spec, model_cfg)) == torch_model.num_params()
    policy = NumpyPolicy(spec, model_cfg, seed=1)
    policy.set_flat(flat)
    np.testing.assert_array_equal(policy.get_flat(), flat)
    obs = np.random.default_rng(2).normal(size=(64, 5)).astype(np.float32)
    with torch.no_grad():
        values = torch_model.value(torch.from_numpy(obs)).numpy()
        mode, mode_logp, _ = torch_model.act(torch.from_numpy(obs), explore=False)
    np.testing.assert_allclose(policy.value(obs), values, rtol=1e-5, atol=1e-6)
    actions, logp, v = policy.act(obs, explore=False)
    np.testing.assert_allclose(actions, mode.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp, mode_logp.numpy(), rtol=1e-4, atol=1e-5)
    # sampled actions: their log-probs agree with the torch model's evaluation
    actions, logp, v = policy.act(obs, explore=True)
    with torch.no_grad():
        t_logp, _, t_v = torch_model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(logp, t_logp.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v, t_v.numpy(), rtol=1e-5, atol=1e-6)
    assert actions.dtype == (np.int64 if spec.act_kind == "discrete" else np.float32)


def test_numpy_sampling_follows_the_probabilities():
    spec = space_spec(OBS, gym.spaces.Discrete(3))
    policy = NumpyPolicy(spec, ModelConfig(fcnet_hiddens=[4]), seed=0)
    flat = np.zeros(policy.num_params(), np.float32)
    policy.set_flat(flat)
    head_bias = policy._params["pi_head.bias"]
    head_bias[:] = np.log([0.2, 0.3, 0.5])
    policy.set_flat(policy.get_flat())
    actions, _, _ = policy.act(np.zeros((30000, 5), np.float32))
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 30000, [0.2, 0.3, 0.5], atol=0.015)


class _ZeroDrawsInFloat32:
    """A Generator whose float32 Exp(1) draws include exact zeros, as numpy's float32
    ziggurat really returns once in ~2^23 draws (its float64 draws: once in ~2^53)."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def standard_exponential(self, size, dtype=np.float64):
        draws = self._rng.standard_exponential(size, dtype)
        if np.dtype(dtype) == np.float32:
            draws[::3] = 0.0
        return draws


@pytest.mark.parametrize("into", [False, True])
def test_sampling_never_picks_an_action_of_probability_zero(into):
    """A near-deterministic policy (the other action's probability, e^-200, underflows to 0
    in float32) never samples that action, whatever the Exp(1) draws, and raises no
    divide-by-zero warning (the old float32 draws did both once in ~2^23)."""
    spec = space_spec(OBS, gym.spaces.Discrete(2))
    policy = NumpyPolicy(spec, ModelConfig(fcnet_hiddens=[4]), seed=0)
    policy.set_flat(np.zeros(policy.num_params(), np.float32))
    policy._params["pi_head.bias"][:] = [200.0, 0.0]  # p(1) = exp(-200): 0 in float32
    policy.set_flat(policy.get_flat())
    policy.rng = _ZeroDrawsInFloat32(1)
    obs = np.zeros((3000, 5), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if into:
            actions, logp, values = np.zeros(3000, np.intp), np.zeros(3000, np.float32), np.zeros(3000, np.float32)
            policy.act_into(obs, True, actions, logp, values)
        else:
            actions, logp, _ = policy.act(obs)
    assert (actions == 0).all()
    np.testing.assert_allclose(logp, 0.0, atol=1e-6)  # log-prob of the sampled (certain) action


def test_torch_policy_wraps_the_module():
    spec = space_spec(OBS, gym.spaces.Discrete(2))
    a, b = TorchPolicy(spec), NumpyPolicy(spec)
    b.set_flat(a.get_flat())
    obs = np.ones((3, 5), np.float32)
    np.testing.assert_allclose(a.value(obs), b.value(obs), rtol=1e-5)
    with pytest.raises(ValueError, match="parameters"):
        b.set_flat(np.zeros(3, np.float32))


def test_env_runner_process_does_not_import_torch():
    code = (
        "import sys; from ftrl.config import PPOConfig; from ftrl.rl.sampling.env_runner import EnvRunner;"
        "r = EnvRunner(PPOConfig().environment('CartPole-v1').to_dict()); r.sample();"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("backend", [NumpyPolicy, TorchPolicy])
@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)])
@pytest.mark.parametrize("explore", [True, False])
def test_act_into_writes_what_act_returns(backend, action_space, explore):
    """A sampler records a step with `act_into` (straight into its fragment's rows): the
    same actions, log-probs and values as `act` from the same random state."""
    spec = space_spec(OBS, action_space)
    a, b = backend(spec, seed=7), backend(spec, seed=7)
    b.set_flat(a.get_flat())
    obs = np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32)
    steps, n = 4, obs.shape[0]
    act_shape = (steps, n) if spec.act_kind == "discrete" else (steps, n, 2)
    actions = np.full(act_shape, -9, spec.action_dtype)
    logp = np.full((steps, n), np.nan, np.float32)
    values = np.full((steps, n), np.nan, np.float32)
    for t in range(steps):
        if backend is TorchPolicy:
            torch.manual_seed(t)
        want = a.act(obs + t, explore)
        if backend is TorchPolicy:
            torch.manual_seed(t)
        b.act_into(obs + t, explore, actions[t], logp[t], values[t])
        for got, expected in zip((actions[t], logp[t], values[t]), want, strict=True):
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)
    assert (actions != -9).all() and not np.isnan(logp).any() and not np.isnan(values).any()


def test_act_into_an_action_row_of_another_integer_type():
    """Rows of another integer dtype than numpy's index type still get the same actions."""
    spec = space_spec(OBS, gym.spaces.Discrete(4))
    a, b = NumpyPolicy(spec, seed=1), NumpyPolicy(spec, seed=1)
    obs = np.random.default_rng(0).normal(size=(9, 5)).astype(np.float32)
    actions, logp, values = np.zeros(9, np.int32), np.zeros(9, np.float32), np.zeros(9, np.float32)
    want = a.act(obs)
    b.act_into(obs, True, actions, logp, values)
    np.testing.assert_array_equal(actions, want[0])
    np.testing.assert_array_equal(logp, want[1])
    np.testing.assert_array_equal(values, want[2])
