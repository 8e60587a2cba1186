"""Spaces the model handles, action sampling, log-probs and flat weights."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ftrl.rl.models.actor_critic import ActorCritic, env_action
from ftrl.rl.spaces import ObsEncoder, SpaceSpec, space_spec
from ftrl.wire.errors import ConfigError


def test_space_specs_and_unsupported_spaces():
    spec = space_spec(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3))
    assert (spec.obs_dim, spec.act_kind, spec.act_dim) == (4, "discrete", 3)
    assert SpaceSpec.from_dict(spec.to_dict()) == spec
    spec = space_spec(gym.spaces.Discrete(5), gym.spaces.Box(-2, 2, (2,)))
    assert spec.obs_dim == 5 and spec.act_low == (-2.0, -2.0)
    with pytest.raises(ConfigError, match="observation space Text"):
        space_spec(gym.spaces.Text(4), gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match="observation part 'a/0' is Text"):
        space_spec(gym.spaces.Dict({"a": gym.spaces.Tuple((gym.spaces.Text(3),))}), gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match="action part '/1' is Text"):
        space_spec(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Text(3))))


def test_obs_encoder_one_hot_and_flatten():
    enc = ObsEncoder(space_spec(gym.spaces.Discrete(3), gym.spaces.Discrete(2)))
    np.testing.assert_array_equal(enc.encode(2), [0, 0, 1])
    enc = ObsEncoder(space_spec(gym.spaces.Box(0, 1, (2, 2)), gym.spaces.Discrete(2)))
    assert enc.encode(np.ones((2, 2))).shape == (4,)


def test_categorical_sampling_matches_probabilities():
    torch.manual_seed(0)
    spec = space_spec(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3))
    model = ActorCritic(spec)
    with torch.no_grad():
        model.pi_head.weight.zero_()
        model.pi_head.bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    obs = torch.zeros(20000, 2)
    actions, logp, values = model.act(obs)
    freq = np.bincount(actions.numpy(), minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.015)
    lp, ent, v = model.evaluate(obs[:5], actions[:5])
    torch.testing.assert_close(lp, logp[:5])
    torch.testing.assert_close(v, values[:5])
    assert model.act(obs[:3], explore=False)[0].tolist() == [2, 2, 2]
    assert ent[0].item() == pytest.approx(-(0.2 * np.log(0.2) + 0.3 * np.log(0.3) + 0.5 * np.log(0.5)), rel=1e-5)


def test_gaussian_logp_matches_torch_distribution():
    torch.manual_seed(1)
    spec = space_spec(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)))
    model = ActorCritic(spec)
    obs = torch.randn(7, 3)
    actions, logp, _ = model.act(obs)
    mean = model.pi_head(model.pi_body(obs))
    dist = torch.distributions.Normal(mean, model.log_std.exp())
    torch.testing.assert_close(logp, dist.log_prob(actions).sum(-1))
    lp, ent, _ = model.evaluate(obs, actions)
    torch.testing.assert_close(lp, logp)
    torch.testing.assert_close(ent, dist.entropy().sum(-1))
    # the env gets clipped actions of the space's shape
    acts = env_action(spec, np.array([[5.0, -5.0]], np.float32))
    np.testing.assert_array_equal(acts[0], [1.0, -1.0])


def test_flat_weights_roundtrip_and_checks():
    spec = space_spec(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    a, b = ActorCritic(spec), ActorCritic(spec)
    flat = a.get_flat()
    assert flat.dtype == np.float32 and flat.size == a.num_params()
    b.set_flat(flat)
    obs = torch.randn(3, 4)
    torch.testing.assert_close(a.value(obs), b.value(obs))
    with pytest.raises(ValueError, match="parameters"):
        b.set_flat(flat[:-1])
    bad = flat.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        b.set_flat(bad)
