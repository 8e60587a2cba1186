"""The seed 002 example: BoxWorld's rules (a chain of boxes to the gem, distractors are
dead ends, a lock without its key is a wall), the relational model's shapes, and the job
file and PBT experiment as a user would start them (every key known, the mutations
accepted, the resources asked for)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ftrl
from examples.boxworld.env import MOVES, BoxWorld
from examples.boxworld.model import RelationalNet
from ftrl import tune
from tests.cluster import REPO


def _walk_to(env: BoxWorld, target: tuple[int, int]) -> tuple[float, bool, dict]:
    """Step the agent to `target` (rows first, then columns; the room is otherwise free of
    the locks this test routes around by placing them itself)."""
    total, done, info = 0.0, False, {}
    while env.agent != target and not done:
        dr = np.sign(target[0] - env.agent[0])
        dc = np.sign(target[1] - env.agent[1]) if dr == 0 else 0
        _, reward, done, _, info = env.step(MOVES.index((int(dr), int(dc))))
        total += reward
    return total, done, info


def _room(env: BoxWorld) -> None:
    """A fixed room: agent (0,0), loose key 0 at (0,1); chain lock 0 -> key 1 at (1,1),
    lock 1 -> gem at (2,1); a distractor lock 0 -> key 3 at (0,3)."""
    env.reset(seed=0)
    env.agent, env.held = (0, 0), -1
    env.loose = {(0, 1): 0}
    env.locks = {(1, 1): (0, 1), (2, 1): (1, -1), (0, 3): (0, 3)}
    env.distractors = {(0, 3)}


def test_the_chain_to_the_gem_solves_and_rewards_each_box():
    env = BoxWorld({"size": 5, "solution_length": 2, "num_distractors": 1, "num_colors": 5})
    _room(env)
    _walk_to(env, (0, 1))
    assert env.held == 0
    reward, done, _ = _walk_to(env, (1, 1))
    assert (reward, done, env.held) == (1.0, False, 1)
    reward, done, info = _walk_to(env, (2, 1))
    assert (reward, done, info) == (10.0, True, {"solved": 1.0})


def test_a_distractor_is_a_dead_end_and_a_lock_without_its_key_a_wall():
    env = BoxWorld({"size": 5, "solution_length": 2, "num_distractors": 1, "num_colors": 5})
    _room(env)
    env.step(MOVES.index((1, 0)))  # down to (1, 0)
    _, reward, done, _, _ = env.step(MOVES.index((0, 1)))  # into lock 0 at (1,1) without a key
    assert env.agent == (1, 0) and (reward, done) == (0.0, False)
    _room(env)
    _walk_to(env, (0, 1))
    _, reward, done, _, info = env.step(MOVES.index((0, 1)))  # (0,2)
    _, reward, done, _, info = env.step(MOVES.index((0, 1)))  # the distractor at (0,3)
    assert (reward, done, info) == (-1.0, True, {"solved": 0.0})


def test_rooms_and_observations():
    env = BoxWorld({"size": 6, "solution_length": 3, "num_distractors": 2, "num_colors": 6})
    obs, _ = env.reset(seed=3)
    assert obs.shape == env.observation_space.shape == (6, 6, 26) and obs.dtype == np.float32
    assert obs[..., 0].sum() == 1 and len(env.locks) == 5 and len(env.loose) == 1
    assert sum(1 for _, content in env.locks.values() if content == -1) == 1  # one gem
    with pytest.raises(ValueError, match="colours"):
        BoxWorld({"solution_length": 5, "num_distractors": 2, "num_colors": 6})
    net = RelationalNet(obs.shape, 4, width=16, heads=2, num_blocks=1)
    logits, value = net(torch.as_tensor(np.stack([obs, obs])))
    assert logits.shape == (2, 4) and value.shape == (2,)


def test_the_job_file_and_the_pbt_experiment_are_accepted_as_a_user_starts_them(tmp_path):
    job = ftrl.load_job(str(REPO / "examples" / "boxworld_impala.toml"))
    config = job.config
    config.validate()
    assert config.training_cfg.opt_type == "rmsprop_tf" and config.environment_cfg.max_episode_steps == 60
    assert config.env_runner_resources() == {"cpu": 1.0, "spot": 1}
    assert config.driver_resources() == {"cpu": 0.0, "ondemand": 0.01}
    tuner = ftrl.Tuner(job, param_space={"lr": tune.loguniform(1e-4, 3e-3)},
                       tune_config=ftrl.TuneConfig(num_samples=4, max_concurrent_trials=2,
                                                   metric="custom_metrics/solved_mean", mode="max",
                                                   scheduler=tune.PopulationBasedTraining(
                                                       time_attr="env_steps_sampled", perturbation_interval=100_000,
                                                       hyperparam_mutations={"lr": [1e-4, 1e-3],
                                                                             "entropy_coeff": [0.01, 0.005],
                                                                             "epsilon": [0.1, 1e-5]})),
                       run_config=ftrl.RunConfig(name="bw", storage_path=str(tmp_path)))
    assert tuner is not None
