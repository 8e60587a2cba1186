"""The CNN models (Nature CNN, IMPALA ResNet): which model a space gets, forward shapes,
flat weights, uint8 scaling, and the runners' torch forward equal to the learner's."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ftrl.config import ModelConfig, PPOConfig
from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.models.actor_critic import ActorCritic
from ftrl.rl.models.check import check_model
from ftrl.rl.models.cnn import ConvActorCritic
from ftrl.rl.models.factory import build_model
from ftrl.rl.models.kinds import NATURE_FILTERS, SMALL_FILTERS, conv_plan, model_kind
from ftrl.rl.models.policy import TorchPolicy, make_policy
from ftrl.rl.spaces import SpaceSpec, space_spec
from ftrl.wire.errors import ConfigError

ATARI_OBS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
DISCRETE = gym.spaces.Discrete(6)
BOX = gym.spaces.Box(-1, 1, (2,), np.float32)


def _spec(obs: gym.Space = ATARI_OBS, act: gym.Space = DISCRETE) -> SpaceSpec:
    return space_spec(obs, act)


def _obs(spec: SpaceSpec, n: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    high = 256 if spec.obs_dtype == "uint8" else 1
    return torch.from_numpy(rng.integers(0, high, (n, spec.obs_dim)).astype(np.float32) if high > 1
                            else rng.normal(size=(n, spec.obs_dim)).astype(np.float32))


def test_the_space_picks_the_model():
    vector = _spec(gym.spaces.Box(-1, 1, (8,), np.float32))
    assert model_kind(vector, ModelConfig()) == "fc"
    assert type(build_model(vector, ModelConfig())) is ActorCritic
    assert model_kind(_spec(), ModelConfig()) == "cnn"  # an image and no model keys: the CNN
    assert model_kind(_spec(gym.spaces.Box(0, 1, (64, 64, 3), np.float32)), ModelConfig()) == "cnn"
    small = _spec(gym.spaces.Box(0, 1, (10, 10, 3), np.float32))  # not an image by default ...
    assert model_kind(small, ModelConfig()) == "fc"
    assert model_kind(small, ModelConfig(conv_filters=[[8, 3, 1]])) == "cnn"  # ... unless asked
    assert SpaceSpec.from_dict({k: v for k, v in _spec().to_dict().items() if k != "obs_dtype"}).obs_dtype == "float32"


def test_bad_model_choices_are_config_errors():
    with pytest.raises(ConfigError, match=r"conv_filters=\[\].*images of shape \(4, 84, 84\).*conv_filters="):
        check_model(_spec(), ModelConfig(conv_filters=[]))
    with pytest.raises(ConfigError, match="conv_filters needs image observations"):
        check_model(_spec(gym.spaces.Box(-1, 1, (8,), np.float32)), ModelConfig(conv_filters=[[16, 3, 1]]))
    with pytest.raises(ConfigError, match="conv_type='impala' needs image observations"):
        check_model(_spec(gym.spaces.Discrete(4)), ModelConfig(conv_type="impala"))
    with pytest.raises(ConfigError, match=r"shrink the 84x84 observation to nothing"):
        check_model(_spec(), ModelConfig(conv_filters=[[16, 8, 8]] * 3))
    with pytest.raises(ConfigError, match="odd kernels"):
        check_model(_spec(), ModelConfig(conv_type="impala", conv_filters=[[16, 4, 2]]))
    with pytest.raises(ConfigError, match="conv_type='impala'"):
        check_model(_spec(), ModelConfig(conv_type="impala", conv_filters=[]))


def test_default_filters_fit_the_image():
    assert conv_plan(_spec(), ModelConfig()).filters == NATURE_FILTERS
    assert conv_plan(_spec(), ModelConfig()).out_shape == (64, 7, 7)
    assert conv_plan(_spec(), ModelConfig(conv_type="impala")).out_shape == (32, 11, 11)
    tiny = _spec(gym.spaces.Box(0, 255, (12, 12, 3), np.uint8))
    assert conv_plan(tiny, ModelConfig()).filters == SMALL_FILTERS


@pytest.mark.parametrize("conv_type", ["nature", "impala"])
@pytest.mark.parametrize("obs", [ATARI_OBS, gym.spaces.Box(0, 255, (40, 36, 3), np.uint8),
                                 gym.spaces.Box(0, 1, (48, 48), np.float32)], ids=["chw", "hwc", "hw"])
@pytest.mark.parametrize("act", [DISCRETE, BOX], ids=["discrete", "box"])
def test_forward_shapes_and_flat_weights(conv_type, obs, act):
    torch.manual_seed(0)
    spec = _spec(obs, act)
    model = build_model(spec, ModelConfig(conv_type=conv_type, post_fcnet_hiddens=[32]))
    assert isinstance(model, ConvActorCritic)
    x = _obs(spec, 3)
    actions, logp, values = model.act(x)
    assert actions.shape == ((3,) if act is DISCRETE else (3, 2))
    assert logp.shape == values.shape == (3,)
    lp, ent, v = model.evaluate(x, actions)
    torch.testing.assert_close(lp, logp)
    torch.testing.assert_close(v, values)
    assert ent.shape == (3,)
    torch.testing.assert_close(model.value(x), values)
    # the layout is the named parameters, and the flat vector round-trips
    assert model.layout == [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    flat = model.get_flat()
    assert flat.dtype == np.float32 and flat.size == model.num_params()
    other = build_model(spec, ModelConfig(conv_type=conv_type, post_fcnet_hiddens=[32]))
    assert not np.array_equal(other.get_flat(), flat)
    other.set_flat(flat)
    np.testing.assert_array_equal(other.get_flat(), flat)
    with torch.no_grad():
        for a, b in zip(model.evaluate(x, actions), other.evaluate(x, actions), strict=True):
            assert torch.equal(a, b)
    with pytest.raises(ValueError, match="parameters"):
        other.set_flat(flat[:-1])


def test_images_are_read_channels_first_and_uint8_scaled():
    spec = _spec(gym.spaces.Box(0, 255, (40, 36, 3), np.uint8))
    model = build_model(spec, ModelConfig())
    raw = np.random.default_rng(0).integers(0, 256, (2, 40, 36, 3)).astype(np.float32)
    img = model.image(torch.from_numpy(raw.reshape(2, -1)))
    np.testing.assert_allclose(img.numpy(), raw.transpose(0, 3, 1, 2) / 255.0, rtol=1e-6)
    floats = _spec(gym.spaces.Box(0, 1, (3, 40, 36), np.float32))
    x = torch.rand(2, floats.obs_dim)
    assert torch.equal(build_model(floats, ModelConfig()).image(x), x.reshape(2, 3, 40, 36))


@pytest.mark.parametrize("conv_type", ["nature", "impala"])
def test_the_runners_torch_forward_equals_the_learners(conv_type):
    torch.manual_seed(0)
    spec = _spec()
    config = (PPOConfig().environment("CartPole-v1")
              .training(model={"conv_type": conv_type}, train_batch_size=64, minibatch_size=32))
    learner = PPOLearner(config, spec, seed=0)
    policy = make_policy("numpy", spec, config.model_config, seed=1)  # no numpy CNN: torch
    assert isinstance(policy, TorchPolicy)
    policy.set_flat(learner.get_weights()[1])
    np.testing.assert_array_equal(policy.get_flat(), learner.get_weights()[1])
    obs = _obs(spec, 5).numpy()
    actions, logp, values = policy.act(obs)
    with torch.no_grad():
        lp, _, v = learner.model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    # equal up to float32 rounding: oneDNN picks its convolution kernel (and so the order
    # of its sums) by the thread count, which earlier tests of a run may have changed
    np.testing.assert_allclose(lp.numpy(), logp, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(v.numpy(), values, rtol=1e-6, atol=1e-6)
