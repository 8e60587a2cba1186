"""An env runner on structured spaces: masked actions never reach the env (on the numpy
and the torch backend, in-process and in sub-env processes), a structured observation
that does not fit fails only its sub-env, and the fragment holds the actions as stored."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.sub_env import SubEnvError
from ftrl.wire import codec

MASKED = "ftrl.testing.struct_envs:MaskedChoiceEnv"


def runner(env_config: dict, restart: bool = False, envs: int = 4, frag: int = 50, **runner_kw) -> EnvRunner:
    cfg = (PPOConfig().environment(MASKED, env_config=env_config)
           .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=frag, **runner_kw)
           .fault_tolerance(restart_failed_sub_environments=restart)
           .debugging(seed=0))
    return EnvRunner(cfg.to_dict(), set_torch_threads=False)


@pytest.mark.parametrize("backend, heads, remote", [("numpy", 1, False), ("torch", 1, False), ("numpy", 3, False),
                                                    ("numpy", 2, True)])
def test_masked_actions_never_reach_the_env(backend, heads, remote):
    r = runner({"heads": heads}, inference_backend=backend, remote_worker_envs=remote)
    try:
        for _ in range(3):  # the env raises on a masked action: no restart is allowed here
            out = r.sample()
        batch = out["batch"]
        assert batch["actions"].dtype == np.int64
        assert batch["actions"].shape == ((50, 4) if heads == 1 else (50, 4, heads))
        assert batch["valid"].all() and r.num_sub_env_restarts == 0
        mask = batch["obs"][..., -heads * 5:].reshape(50, 4, heads, 5) > 0
        taken = batch["actions"].reshape(50, 4, heads)
        assert np.take_along_axis(mask, taken[..., None], axis=-1).all()
        assert codec.decode(codec.encode(out))["batch"]["actions"].tolist() == batch["actions"].tolist()
    finally:
        r.stop()


def test_an_observation_that_does_not_fit_fails_its_sub_env_alone(caplog):
    r = runner({"misfit_at": 7, "episode_len": 10}, restart=True, envs=2, frag=30)
    try:
        with caplog.at_level(logging.WARNING):
            out = r.sample()
        assert r.num_sub_env_restarts >= 2  # each sub-env at its 7th step, every episode
        assert not out["batch"]["valid"].all()
        assert "observations/target" in caplog.text  # the part that was missing is named
    finally:
        r.stop()
    strict = runner({"misfit_at": 3}, restart=False, envs=2, frag=10)
    try:
        with pytest.raises(SubEnvError, match="observations/target"):
            strict.sample()
    finally:
        strict.stop()


def test_a_tuple_action_is_stored_as_float_columns_and_reaches_the_env_nested():
    cfg = (PPOConfig().environment("ftrl.testing.struct_envs:MixedActionEnv")
           .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=20).debugging(seed=0))
    r = EnvRunner(cfg.to_dict(), set_torch_threads=False)
    try:
        batch = r.sample()["batch"]  # the env checks each action is in its Tuple space
        assert batch["actions"].shape == (20, 2, 2) and batch["actions"].dtype == np.float32
        assert set(np.unique(batch["actions"][..., 0])) <= {0.0, 1.0} and r.num_sub_env_restarts == 0
    finally:
        r.stop()
