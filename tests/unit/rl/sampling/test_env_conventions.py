"""RLlib's env conventions: an EnvContext for creators and RLlib-style Env classes, and a
time limit on any env (`max_episode_steps`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import ftrl
from ftrl.config import PPOConfig
from ftrl.rl.sampling.env_factory import EnvContext, make_env, probe_spaces, takes_env_context
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.testing.envs import ContextEnv, CounterEnv
from ftrl.wire.errors import ConfigError

CONTEXT_ENV = "ftrl.testing.envs:ContextEnv"


class _KeywordEnv(CounterEnv):
    """A keyword-style class with one required parameter, which env_config names."""

    def __init__(self, episode_len: int, truncate: bool = False):
        super().__init__(episode_len, truncate)


_CREATED: list = []


def _recording_creator(config):
    _CREATED.append(config)
    return CounterEnv(int(config["episode_len"]))


def test_an_rllib_style_class_gets_an_env_context():
    env = make_env(CONTEXT_ENV, {"episode_len": 3}, context=EnvContext(worker_index=2, vector_index=1,
                                                                       num_workers=4, remote=True))
    obs, _ = env.reset()
    assert obs.tolist() == [2.0, 1.0, 4.0, 1.0, 0.0]
    assert env.unwrapped.episode_len == 3  # env_config travels as the context's dict
    assert ftrl.EnvContext is EnvContext
    context = EnvContext({"a": 1}, worker_index=3)
    assert context == {"a": 1} and context.worker_index == 3 and context.where()["vector_index"] == 0


def test_keyword_style_classes_and_creators_keep_working():
    assert takes_env_context(ContextEnv, {})
    assert not takes_env_context(_KeywordEnv, {"episode_len": 4})  # env_config names its parameter
    assert not takes_env_context(CounterEnv, {})  # no required parameter: keywords
    env = make_env("ftrl.testing.envs:CounterEnv", {"episode_len": 2})
    env.reset()
    assert env.step(0)[2] is False and env.step(0)[2] is True
    env = make_env("tests.unit.rl.sampling.test_env_conventions:_recording_creator", {"episode_len": 2},
                   context=EnvContext(worker_index=5))
    assert isinstance(env, gym.Env)
    got = _CREATED[-1]
    assert isinstance(got, EnvContext) and got.worker_index == 5 and got == {"episode_len": 2}


def test_max_episode_steps_limits_any_env_and_the_smaller_limit_wins():
    env = make_env(CONTEXT_ENV, {}, max_episode_steps=4)  # never ends by itself
    env.reset()
    flags = [env.step(0)[2:4] for _ in range(4)]
    assert flags == [(False, False)] * 3 + [(False, True)]  # truncated, not terminated
    cartpole = make_env("CartPole-v1", max_episode_steps=1000)
    assert cartpole.spec.max_episode_steps == 500  # its registered limit is smaller
    assert make_env("CartPole-v1", max_episode_steps=20).spec.max_episode_steps == 20
    counter = make_env("ftrl.testing.envs:make_counter_env", {"episode_len": 3}, max_episode_steps=10)
    counter.reset()
    assert [counter.step(0)[2] for _ in range(3)][-1] is True  # its own end comes first


def test_a_bad_max_episode_steps_is_a_config_error_naming_the_key():
    for bad in (0, -3, 2.5, "10"):
        with pytest.raises(ConfigError, match="max_episode_steps"):
            PPOConfig().environment("CartPole-v1", max_episode_steps=bad).validate()


@pytest.mark.parametrize("remote", [False, True])
def test_runners_give_each_sub_env_its_context_and_the_time_limit(remote):
    cfg = (PPOConfig().environment(CONTEXT_ENV, max_episode_steps=6)
           .env_runners(num_env_runners=3, num_envs_per_env_runner=2, rollout_fragment_length=13,
                        remote_worker_envs=remote))
    runner = EnvRunner(cfg, worker_index=2, set_torch_threads=False)
    try:
        out = runner.sample()
        obs = out["batch"]["obs"]
        assert obs.shape[:2] == (13, 2)
        np.testing.assert_array_equal(obs[0, :, :4], [[2, 0, 3, float(remote)], [2, 1, 3, float(remote)]])
        assert list(out["episodes"]["lengths"]) == [6, 6, 6, 6]  # two cut episodes per sub-env
        assert out["batch"]["truncateds"].sum() == 4 and not out["batch"]["terminateds"].any()
    finally:
        runner.stop()
    assert probe_spaces(CONTEXT_ENV)[0].shape == (5,)
