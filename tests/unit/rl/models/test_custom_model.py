"""A user's torch module by import path (`model={"custom_model": ...}`): the adapter's
act/evaluate/flat weights, the runners' forward equal to the learner's, and a
ConfigError naming the key for each way to get it wrong, before anything starts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ftrl.config import ModelConfig, PPOConfig
from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.models.check import check_model
from ftrl.rl.models.custom import CustomActorCritic
from ftrl.rl.models.factory import build_model
from ftrl.rl.models.policy import TorchPolicy, make_policy
from ftrl.rl.spaces import space_spec
from ftrl.wire.errors import ConfigError

OBS = gym.spaces.Box(-1, 1, (3, 2), np.float32)
TINY = "tests.custom_models:TinyNet"


@pytest.mark.parametrize("act", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)],
                         ids=["discrete", "box"])
def test_a_custom_model_acts_evaluates_and_round_trips(act):
    torch.manual_seed(0)
    spec = space_spec(OBS, act)
    config = ModelConfig(custom_model=TINY, custom_model_config={"hidden": 8}, init_log_std=-1.0)
    model = build_model(spec, config)
    assert isinstance(model, CustomActorCritic)
    assert model.net.body[1].in_features == 6 and model.net.logits.out_features == spec.act_dim
    names = [name for name, _ in model.layout]
    assert names == [n for n, _ in model.named_parameters()]
    assert ("log_std" in names) == (act.__class__ is gym.spaces.Box)
    x = torch.randn(4, spec.obs_dim)
    actions, logp, values = model.act(x)
    assert logp.shape == values.shape == (4,)
    lp, ent, v = model.evaluate(x, actions)
    torch.testing.assert_close(lp, logp)
    torch.testing.assert_close(v, values)
    if act.__class__ is gym.spaces.Box:
        assert torch.allclose(ent, torch.full((4,), 2 * (-1.0 + 0.5 * (1 + np.log(2 * np.pi)))))
    other = build_model(spec, config)
    other.set_flat(model.get_flat())
    with torch.no_grad():
        assert torch.equal(other.evaluate(x, actions)[0], model.evaluate(x, actions)[0])


def test_discrete_observations_arrive_one_hot():
    spec = space_spec(gym.spaces.Discrete(5), gym.spaces.Discrete(2))
    model = build_model(spec, ModelConfig(custom_model=TINY))
    assert model.obs_shape == (5,)


def test_the_runners_forward_equals_the_learners():
    spec = space_spec(OBS, gym.spaces.Discrete(3))
    config = PPOConfig().environment("CartPole-v1").training(model={"custom_model": TINY})
    learner = PPOLearner(config, spec, seed=0)
    policy = make_policy("numpy", spec, config.model_config, seed=1)
    assert isinstance(policy, TorchPolicy)
    policy.set_flat(learner.get_weights()[1])
    obs = np.random.default_rng(0).normal(size=(6, spec.obs_dim)).astype(np.float32)
    actions, logp, values = policy.act(obs)
    with torch.no_grad():
        lp, _, v = learner.model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(lp.numpy(), logp, rtol=0, atol=1e-6)
    np.testing.assert_allclose(v.numpy(), values, rtol=0, atol=1e-6)


@pytest.mark.parametrize("path, config, message", [
    ("tests.no_such_module:Net", {}, r"custom_model 'tests.no_such_module:Net' does not import.*no_such_module"),
    ("tests.custom_models:NoSuchNet", {}, r"custom_model .* does not import.*has no attribute 'NoSuchNet'"),
    ("tests.custom_models:NotAModule", {}, r"custom_model .* is a type, not a torch.nn.Module class"),
    ("tests.custom_models:not_a_class", {}, r"custom_model .* is a function, not a torch.nn.Module class"),
    ("tests.custom_models:WrongLogits", {}, r"custom_model .* returned shapes \(\(2, 4\), \(2,\)\); it must return .*logits \(2, 3\)"),
    ("tests.custom_models:OnlyLogits", {}, r"custom_model .* forward .* raised TypeError: forward returned Tensor, not \(logits, value\)"),
    (TINY, {"width": 3}, r"custom_model .* TinyNet\(\(3, 2\), 3, \*\*custom_model_config=\{'width': 3\}\) raised TypeError"),
])
def test_bad_custom_models_are_config_errors_naming_the_key(path, config, message):
    spec = space_spec(OBS, gym.spaces.Discrete(3))
    with pytest.raises(ConfigError, match=message):
        check_model(spec, ModelConfig(custom_model=path, custom_model_config=config))


def test_a_bad_custom_model_fails_the_build_before_any_sampling():
    config = (PPOConfig().environment("CartPole-v1")
              .training(model={"custom_model": "tests.custom_models:WrongLogits"}, train_batch_size=64, minibatch_size=32))
    with pytest.raises(ConfigError, match="custom_model"):
        config.build()
    with pytest.raises(ConfigError, match="model custom_model must be an import path"):
        PPOConfig().training(model={"custom_model": "tests.custom_models.TinyNet"})


def test_ppo_trains_a_custom_model():
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2, rollout_fragment_length=32)
              .training(model={"custom_model": TINY}, train_batch_size=64, minibatch_size=32, num_epochs=1)
              .debugging(seed=0))
    algo = config.build()
    try:
        assert algo.local_runner.policy.backend == "torch"
        _, before = algo.get_weights()
        result = algo.train()
        assert result["env_steps_sampled"] == 64
        assert not np.array_equal(algo.get_weights()[1], before)
        np.testing.assert_array_equal(algo.local_runner.policy.get_flat(), algo.get_weights()[1])
    finally:
        algo.stop()
