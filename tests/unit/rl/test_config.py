"""Config builder: names, serialization, validation, conflicts."""

from __future__ import annotations

import pytest

import ftrl
from ftrl.config import PPOConfig, StopCriteria, load_job
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
        (lambda c: c.env_runners(max_weights_lag=-1), "max_weights_lag"),
        (lambda c: c.evaluation(evaluation_duration_unit="minutes"), "evaluation_duration_unit"),
    ],
)
def test_bad_values_raise(change, match):
    cfg = PPOConfig().environment("CartPole-v1")
    with pytest.raises(ConfigError, match=match):
        change(cfg).validate()


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
