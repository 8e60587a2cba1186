"""Config builder: names, serialization, validation, conflicts."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

import ftrl
from ftrl import config as config_mod
from ftrl.config import (
    ModelConfig,
    PPOConfig,
    StopCriteria,
    describe,
    fields,
    fields_of,
    load_job,
    sections,
)
from ftrl.config.jobs import parse_overrides
from ftrl.wire.errors import ConfigError


def test_builder_chain_sets_values_and_attribute_access():
    cfg = (
        PPOConfig()
        .environment("CartPole-v1", env_config={"max_episode_steps": 100})
        .env_runners(num_env_runners=2, num_envs_per_env_runner=8, observation_filter="MeanStdFilter")
        .training(lr=1e-3, gamma=0.98, model={"fcnet_hiddens": [32]})
        .fault_tolerance(restart_failed_sub_environments=True)
        .debugging(seed=3)
    )
    assert cfg.num_env_runners == 2
    assert cfg.lr == 1e-3
    assert cfg.env_config == {"max_episode_steps": 100}
    assert cfg.model_config.fcnet_hiddens == [32]
    assert cfg.model_config.fcnet_activation == "tanh"  # default kept
    assert cfg.restart_failed_env_runners is True  # RLlib default
    cfg.validate()


def test_ftrl_exports_ppo_config_lazily():
    assert ftrl.PPOConfig is PPOConfig


def test_to_dict_from_dict_roundtrip_flat_and_sections():
    cfg = PPOConfig().environment("CartPole-v1").training(lr=0.01, lr_schedule=[[0, 0.01], [1000, 0.0]])
    flat = cfg.to_dict()
    assert flat["algo"] == "PPO" and flat["lr"] == 0.01
    assert PPOConfig.from_dict(flat) == cfg
    assert PPOConfig.from_dict(cfg.to_sections()) == cfg


def test_unknown_key_names_the_nearest():
    with pytest.raises(ConfigError, match=r"'num_env_runner'.*did you mean 'num_env_runners'"):
        PPOConfig.from_dict({"num_env_runner": 2})
    with pytest.raises(ConfigError, match="did you mean 'lr'"):
        PPOConfig().training(lrr=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="fcnet_hiddens"):
        PPOConfig().training(model={"fcnet_hidden": [3]})
    with pytest.raises(ConfigError, match=r"\[env_runners\].*num_envs_per_env_runner"):
        PPOConfig.from_dict({"env_runners": {"num_envs_per_env_runners": 2}})


def test_wrong_types_rejected():
    with pytest.raises(ConfigError, match="num_env_runners must be int"):
        PPOConfig().env_runners(num_env_runners="2")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lr must be float"):
        PPOConfig().training(lr=True)
    # ints are fine where floats are expected
    assert PPOConfig().training(lr=1).lr == 1.0


def test_ignore_and_restart_are_mutually_exclusive():
    with pytest.raises(ConfigError, match="mutually exclusive"):
        PPOConfig().environment("CartPole-v1").fault_tolerance(
            restart_failed_env_runners=True, ignore_env_runner_failures=True
        ).validate()
    # asking only to ignore failures turns the (default) restarts off
    cfg = PPOConfig().environment("CartPole-v1").fault_tolerance(ignore_env_runner_failures=True)
    assert cfg.restart_failed_env_runners is False
    cfg.validate()
    # ... unless restarts were asked for explicitly before
    cfg = PPOConfig().environment("CartPole-v1").fault_tolerance(restart_failed_env_runners=True)
    cfg.fault_tolerance(ignore_env_runner_failures=True)
    with pytest.raises(ConfigError, match="mutually exclusive"):
        cfg.validate()


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda c: c.env_runners(observation_filter="MeanStd"), "did you mean 'MeanStdFilter'"),
        (lambda c: c.training(minibatch_size=500, train_batch_size=100), "minibatch_size"),
        (lambda c: c.training(gamma=1.5), "gamma"),
        (lambda c: c.env_runners(rollout_fragment_length=0), "rollout_fragment_length"),
        (lambda c: c.env_runners(sample_timeout_s=-1.0), "sample_timeout_s"),
        (lambda c: c.training(lr_schedule=[[10, 0.1], [5, 0.0]]), "must not decrease"),
        (lambda c: c.training(model={"fcnet_hiddens": []}), "fcnet_hiddens"),
        (lambda c: c.learners(num_learners=-1), "num_learners"),
        (lambda c: c.learners(num_learners=2, min_learners=3), "min_learners=3 is more than"),
        (lambda c: c.learners(num_learners=2, n_init_learners=3), "n_init_learners"),
        (lambda c: c.learners(num_learners=2, learner_collective_timeout_s=0), "learner_collective_timeout_s"),
        (lambda c: c.learners(num_learners=2, num_gpus_per_learner=-1), "num_gpus_per_learner"),
        (lambda c: c.learners(num_learners=0, num_gpus_per_learner=1), "needs learner actors"),
        (lambda c: c.learners(num_learners=1, num_gpus_per_learner=2), "a learner uses one GPU"),
        (lambda c: c.learners(num_learners=2, num_gpus_per_learner=0.5), "cannot form an NCCL group"),
        (lambda c: c.env_runners(max_weights_lag=-1), "max_weights_lag"),
        (lambda c: c.evaluation(evaluation_duration_unit="minutes"), "evaluation_duration_unit"),
    ],
)
def test_bad_values_raise(change, match):
    cfg = PPOConfig().environment("CartPole-v1")
    with pytest.raises(ConfigError, match=match):
        change(cfg).validate()


def test_whole_gpus_per_learner_and_one_fractional_learner_are_valid():
    for learners in (dict(num_learners=4, num_gpus_per_learner=1), dict(num_learners=1, num_gpus_per_learner=0.25)):
        PPOConfig().environment("CartPole-v1").learners(**learners).validate()


def test_missing_env_is_an_error():
    with pytest.raises(ConfigError, match="no environment"):
        PPOConfig().validate()


def test_rollout_fragment_length_auto():
    cfg = PPOConfig().environment("CartPole-v1").training(train_batch_size=1000)
    cfg.env_runners(num_env_runners=2, num_envs_per_env_runner=4)
    assert cfg.get_rollout_fragment_length() == 125
    cfg.env_runners(rollout_fragment_length=7)
    assert cfg.get_rollout_fragment_length() == 7


def test_toml_job_with_sections_flat_keys_and_stop(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(
        """
algo = "ppo"
lr = 0.002
[environment]
env = "CartPole-v1"
[env_runners]
num_env_runners = 3
[training.model]
fcnet_hiddens = [16, 16]
[stop]
stop_reward = 450
stop_iters = 7
"""
    )
    job = load_job(path)
    assert job.config.lr == 0.002
    assert job.config.num_env_runners == 3
    assert job.config.model_config.fcnet_hiddens == [16, 16]
    assert job.stop == StopCriteria(stop_reward=450.0, stop_timesteps=None, stop_iters=7)
    path.write_text("[stop]\nstop_rewards = 1\n")
    with pytest.raises(ConfigError, match="did you mean 'stop_reward'"):
        load_job(path)
    path.write_text("not toml = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_job(path)
    with pytest.raises(ConfigError, match="unknown algorithm"):
        load_job(data={"algo": "DQNX"})


def test_stop_criteria():
    stop = StopCriteria(stop_reward=100.0, stop_timesteps=1000)
    assert stop.met({"episode_return_mean": None, "env_steps_sampled": 10}) is None
    assert stop.met({"episode_return_mean": 100.0, "env_steps_sampled": 10}) == "stop_reward"
    assert stop.met({"episode_return_mean": 5.0, "env_steps_sampled": 1000}) == "stop_timesteps"
    assert StopCriteria(stop_iters=3).met({"iteration": 3}) == "stop_iters"


# --------------------------------------------------------------------------- one definition per field

SECTIONS = PPOConfig.section_classes()
ALL_KEYS = [(section, key) for section, cls in SECTIONS.items() for key in fields_of(cls)]


def _toml(value):
    """A TOML literal for --set (no None in TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def test_every_field_has_a_one_line_doc():
    for cls in [*SECTIONS.values(), ModelConfig, StopCriteria]:
        for key, (_, f) in fields_of(cls).items():
            doc = f.metadata.get("doc")
            assert isinstance(doc, str) and doc.strip(), f"{cls.__name__}.{key} has no doc"
            assert "\n" not in doc, f"{cls.__name__}.{key}: doc must be one line"
    text = describe()
    for _, key in ALL_KEYS:
        assert f"  {key}: " in text
    assert "[training.model]" in text and "  fcnet_hiddens: " in text and "[stop]" in text


def test_every_default_passes_its_own_checks():
    cfg = PPOConfig().environment("CartPole-v1")
    cfg.validate()
    for cls in [*SECTIONS.values(), ModelConfig, StopCriteria]:
        instance = cls()
        for key in fields_of(cls):
            config_mod.check_value(cls, key, getattr(instance, key), where="test")


def test_keys_are_unique_across_sections_and_flat_dict_has_them_all():
    keys = [key for _, key in ALL_KEYS]
    assert len(keys) == len(set(keys))
    assert set(PPOConfig().to_dict()) == {*keys, "algo"}
    assert "env_step_timeout_s" in fields_of(SECTIONS["env_runners"])


PATHS = ("builder", "table", "flat", "--set")


def _apply(path, section, key, value):
    """Set one key by one of the four ways a user can."""
    if path == "builder":
        return getattr(PPOConfig(), section)(**{key: value})
    if path == "table":
        return PPOConfig.from_dict({section: {key: value}})
    if path == "flat":
        return PPOConfig.from_dict({key: value})
    return PPOConfig().update_from_dict(parse_overrides([f"{key}={_toml(value)}"]))


# a valid non-default value for keys whose default is None (TOML has no None)
_GOOD = {"env": "CartPole-v1", "seed": 7, "evaluation_interval": 2, "n_init_learners": 1,
         "vf_clip_param": 1.0, "lr_schedule": [[0, 0.1]], "clip_param_schedule": [[0, 0.1]],
         "min_time_s_per_iteration": 2.0, "callbacks_class": "pkg.mod:MyCallbacks", "max_episode_steps": 200,
         "custom_resources_per_env_runner": {"spot": 1.0}, "custom_resources_per_learner": {"ondemand": 1.0},
         "custom_resources_for_main_process": {"ondemand": 0.5}}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("section, key", ALL_KEYS)
def test_builder_toml_tables_flat_keys_and_set_accept_the_same_keys(section, key, path):
    value = _GOOD.get(key, getattr(getattr(PPOConfig(), f"{section}_cfg"), key))
    cfg = _apply(path, section, key, value)
    assert getattr(cfg, key) == value
    assert key in cfg._explicit


def test_builder_methods_take_exactly_their_sections_keys():
    for section, cls in SECTIONS.items():
        params = inspect.signature(getattr(PPOConfig, section)).parameters
        assert [p for p in params if p != "self"] == list(fields_of(cls)), section
        # RLlib's positional forms: .environment("CartPole-v1"), .callbacks("pkg.mod:MyCallbacks")
        assert all(params[k].kind is inspect.Parameter.KEYWORD_ONLY for k in fields_of(cls)
                   if k not in ("env", "callbacks_class"))
        other = next(k for s, k in ALL_KEYS if s != section)
        with pytest.raises(ConfigError, match=rf"unknown key {other!r} in {section}\(\)"):
            getattr(PPOConfig(), section)(**{other: 1})
    assert "env_step_timeout_s" in (PPOConfig.env_runners.__doc__ or "")


def _wrong_type(tp_name):
    return 3 if tp_name == "dict" else {"x": 1}


# a value of the right type that its field's check refuses, per kind of check
_BAD_BY_CHECK = {
    fields.positive_int: 0,
    fields.non_negative_int: -1,
    fields.positive_float: 0.0,
    fields.non_negative_float: -1.0,
    fields.unit_interval: 1.5,
    fields.check_schedule: [[10, 0.1], [5, 0.0]],
    sections._fragment_length: "short",
    sections._seed: -1,
    sections._eval_overrides: {"lr": 1.0},
    sections._hidden_sizes: [],
    sections._conv_filters: [[32, 8]],
    sections._import_path: "no_colon",
    sections.custom_resources: {"spot": 0},
    sections._runner_gpus: 1.5,
}


def _bad_values(cls, key):
    tp, f = fields_of(cls)[key]
    out = [_wrong_type(getattr(tp, "__name__", ""))]
    check = f.metadata.get("check")
    if check is not None:
        out.append("nope" if check.__qualname__.startswith("one_of") else _BAD_BY_CHECK[check])
    return out


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("section, key", ALL_KEYS)
def test_a_bad_value_raises_in_every_path(section, key, path):
    for bad in _bad_values(SECTIONS[section], key):
        with pytest.raises(ConfigError, match=key):
            _apply(path, section, key, bad)


@pytest.mark.parametrize("key", list(fields_of(ModelConfig)))
def test_bad_model_values_raise(key):
    for bad in _bad_values(ModelConfig, key):
        with pytest.raises(ConfigError, match=f"model {key}"):
            PPOConfig().training(model={key: bad})
    with pytest.raises(ConfigError, match="model fcnet_hiddens"):
        PPOConfig().training(model={"fcnet_hiddens": []})
    with pytest.raises(ConfigError, match=r"model fcnet_activation.*did you mean 'relu'"):
        PPOConfig.from_dict({"training": {"model": {"fcnet_activation": "reluu"}}})


def test_a_refused_call_changes_nothing():
    cfg = PPOConfig()
    with pytest.raises(ConfigError, match="num_envs_per_env_runner"):
        cfg.env_runners(num_env_runners=5, num_envs_per_env_runner=0)
    assert cfg.num_env_runners == 0 and "num_env_runners" not in cfg._explicit


def test_validate_checks_values_written_into_the_sections():
    cfg = PPOConfig().environment("CartPole-v1")
    cfg.env_runners_cfg.env_step_timeout_s = 0.0
    with pytest.raises(ConfigError, match="env_step_timeout_s must be a positive"):
        cfg.validate()
    cfg = PPOConfig().environment("CartPole-v1")
    cfg.training_cfg.model = {"fcnet_hiddens": [0]}
    with pytest.raises(ConfigError, match="fcnet_hiddens"):
        cfg.validate()


def test_section_dataclasses_keep_their_defaults_and_copies():
    a, b = ModelConfig(), ModelConfig()
    a.fcnet_hiddens.append(1)
    assert b.fcnet_hiddens == [64, 64]
    assert dataclasses.asdict(PPOConfig().env_runners_cfg)["env_step_timeout_s"] == 60.0
