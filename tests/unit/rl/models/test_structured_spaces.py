"""Dict/Tuple observations, MultiDiscrete and Tuple actions, and action masks: the spec,
the encoder, the numpy and torch policies (same numbers), the filter and the export."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ftrl.config import ModelConfig
from ftrl.rl.models.factory import build_model
from ftrl.rl.models.policy import NumpyPolicy
from ftrl.rl.sampling.filters import make_filter
from ftrl.rl.spaces import ObsEncoder, SpaceSpec, env_action, space_spec
from ftrl.testing.struct_envs import MaskedChoiceEnv, MixedActionEnv
from ftrl.wire.errors import ConfigError


def masked_spec(heads: int = 1, n: int = 5) -> tuple[SpaceSpec, MaskedChoiceEnv]:
    env = MaskedChoiceEnv({"heads": heads, "num_choices": n})
    return space_spec(env.observation_space, env.action_space), env


def encoded(spec: SpaceSpec, env: gym.Env, count: int, seed: int = 0) -> np.ndarray:
    enc = ObsEncoder(spec)
    rows = np.zeros((count, spec.obs_dim), np.float32)
    env.reset(seed=seed)
    for i in range(count):
        enc.write(rows, i, env._observe())
    return rows


def test_a_dict_observation_is_its_leaves_side_by_side_the_mask_last():
    spec, _ = masked_spec(heads=2, n=3)
    assert spec.obs_kind == "struct" and spec.act_kind == "multi"
    # gymnasium's Dict orders its keys; the mask goes last whatever its place
    assert [p.path for p in spec.obs_parts] == ["observations/step", "observations/target", "action_mask"]
    assert spec.obs_dim == 20 + 6 + 6 and spec.mask_dim == 6 and spec.input_dim == 26
    assert spec.act_dim == 6 and spec.action_row_shape == (2,) and spec.action_dtype == np.int64
    assert SpaceSpec.from_dict(spec.to_dict()) == spec
    obs = {"observations": {"target": [0, 1, 0, 0, 0, 1], "step": 3}, "action_mask": [1, 1, 0, 0, 1, 1]}
    row = ObsEncoder(spec).encode(obs)
    assert row[3] == 1.0 and row[:20].sum() == 1.0 and row[20:26].tolist() == [0, 1, 0, 0, 0, 1]
    assert row[26:].tolist() == [1, 1, 0, 0, 1, 1]
    assert env_action(spec, np.array([[2, 0]]))[0].tolist() == [2, 0]


def test_bad_structured_input_is_named():
    with pytest.raises(ConfigError, match=r"'action_mask' has 4 entries.*6 discrete choices"):
        space_spec(gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (2,)), "action_mask": gym.spaces.Box(0, 1, (4,))}),
                   gym.spaces.MultiDiscrete([3, 3]))
    spec, _ = masked_spec(heads=2, n=3)
    enc = ObsEncoder(spec)
    with pytest.raises(ValueError, match="allows no action of action part 1"):
        enc.encode({"observations": {"target": [0] * 6, "step": 0}, "action_mask": [1, 0, 0, 0, 0, 0]})
    with pytest.raises(ValueError, match="'observations/target' is missing"):
        enc.encode({"observations": {"step": 0}, "action_mask": [1] * 6})
    with pytest.raises(ValueError, match="'observations/step': 30 is outside Discrete"):
        enc.encode({"observations": {"target": [0] * 6, "step": 30}, "action_mask": [1] * 6})
    with pytest.raises(ValueError, match="'action_mask' has shape"):
        enc.encode({"observations": {"target": [0] * 6, "step": 0}, "action_mask": [1] * 5})


@pytest.mark.parametrize("heads", [1, 3])
def test_numpy_and_torch_policies_agree_and_never_pick_a_masked_choice(heads):
    spec, env = masked_spec(heads=heads)
    model_cfg = ModelConfig(fcnet_hiddens=[16, 16])
    model = build_model(spec, model_cfg)
    numpy_policy = NumpyPolicy(spec, model_cfg, seed=0)
    numpy_policy.set_flat(model.get_flat())
    rows = encoded(spec, env, 400)
    allowed = rows[:, spec.input_dim:] > 0
    with torch.no_grad():
        logits, values = model._outputs(torch.from_numpy(rows))
    np_logits, np_values = numpy_policy._forward(rows)
    assert np.allclose(np_logits, logits.numpy(), atol=1e-5) and np.allclose(np_values, values.numpy(), atol=1e-5)
    for explore in (True, False):
        actions, logp, _ = numpy_policy.act(rows, explore)
        t_actions, _, _ = model.act(torch.from_numpy(rows), explore)
        for a in (actions.reshape(len(rows), heads), t_actions.numpy().reshape(len(rows), heads)):
            taken = a + np.arange(heads) * 5
            assert allowed[np.arange(len(rows))[:, None], taken].all()  # never a masked choice
        # the learner's log-prob of the runner's action is the runner's
        lp, entropy, _ = model.evaluate(torch.from_numpy(rows), torch.from_numpy(actions))
        assert np.allclose(lp.detach().numpy(), logp, atol=1e-4)
        assert torch.isfinite(entropy).all() and (entropy >= 0).all()


def test_a_tuple_action_of_a_discrete_and_a_box_part():
    env = MixedActionEnv({})
    spec = space_spec(env.observation_space, env.action_space)
    assert spec.act_kind == "multi" and spec.act_dim == 3 and spec.action_row_shape == (2,)
    assert spec.action_dtype == np.float32 and spec.box_dim == 1
    model = build_model(spec, ModelConfig(fcnet_hiddens=[8]))
    numpy_policy = NumpyPolicy(spec, ModelConfig(fcnet_hiddens=[8]), seed=1)
    numpy_policy.set_flat(model.get_flat())
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 1)).astype(np.float32)
    actions, logp, _ = numpy_policy.act(obs, True)
    assert set(np.unique(actions[:, 0])) <= {0.0, 1.0}
    lp, _, _ = model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    assert np.allclose(lp.detach().numpy(), logp, atol=1e-4)
    side, value = env_action(spec, np.array([[1.0, 3.0]], np.float32))[0]
    assert side == 1 and value.tolist() == [1.0]  # clipped to the Box's bounds
    env.reset(seed=0)
    env.step((side, value))


def test_the_filter_leaves_one_hot_and_mask_columns_as_they_are():
    spec, env = masked_spec()
    rows = encoded(spec, env, 50) * 3.0  # the Box part "target" (columns 20-24) is normalized
    rows[:, :20] /= 3.0
    rows[:, 25:] /= 3.0
    filt = make_filter("MeanStdFilter", (spec.obs_dim,), spec.unfiltered_columns())
    out = filt(rows)
    raw = spec.unfiltered_columns()
    assert raw == [*range(20), *range(25, 30)]  # "step" (one-hot) and the mask
    assert np.array_equal(out[:, raw], rows[:, raw])
    assert not np.allclose(out[:, 20:25], rows[:, 20:25])


@pytest.mark.parametrize("heads", [1, 2])
def test_an_exported_masked_policy_never_acts_masked(tmp_path, heads):
    from ftrl.rl.models.export import export_policy, load_exported

    spec, env = masked_spec(heads=heads)
    model = build_model(spec, ModelConfig(fcnet_hiddens=[8]))
    path = export_policy(model, spec, None, tmp_path, "torchscript")
    rows = encoded(spec, env, 100, seed=3)
    _, action = load_exported(path)(rows)
    action = np.asarray(action).reshape(len(rows), heads).astype(np.int64)
    allowed = rows[:, spec.input_dim:] > 0
    assert allowed[np.arange(len(rows))[:, None], action + np.arange(heads) * 5].all()


def test_a_custom_model_gets_a_dict_observation_as_nested_tensors_without_the_mask():
    spec, env = masked_spec(heads=2, n=5)
    model = build_model(spec, ModelConfig(custom_model="tests.custom_models:TargetNet"))
    assert model.obs_shape == {"observations": {"step": (20,), "target": (10,)}}
    rows = encoded(spec, env, 200)
    actions, _, _ = model.act(torch.from_numpy(rows))
    allowed = rows[:, spec.input_dim:] > 0
    assert allowed[np.arange(200)[:, None], actions.numpy() + np.array([0, 5])].all()
