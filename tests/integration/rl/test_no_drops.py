"""A calm run uses every fragment it asked for: synchronous rounds wait for every request,
so fragments that add up to more than train_batch_size make a bigger batch instead of
coming back after the weights moved on and being dropped (RLlib's semantics). The same
seed gives the same run with several runners, whichever runner answers first."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl.config import load_job
from tests.cluster import REPO

CARTPOLE_JOB = REPO / "examples" / "cartpole_ppo.toml"


@pytest.mark.parametrize("num_env_runners", [1, 2, 4])
@pytest.mark.parametrize("fragment", ["file", 32])
def test_calm_run_drops_no_env_steps(make_cluster, num_env_runners, fragment):
    cluster = make_cluster(slots=4)
    config = load_job(CARTPOLE_JOB).config  # rollout_fragment_length = "auto" there
    config.env_runners(num_env_runners=num_env_runners).debugging(seed=1)
    if fragment != "file":
        # explicit fragments that add up to more than train_batch_size (256) with 2+ runners
        config.env_runners(rollout_fragment_length=fragment)
    algo = config.build(client=cluster.client(), job_name=f"calm{num_env_runners}")
    try:
        results = [algo.train() for _ in range(6)]
    finally:
        algo.stop()
    last = results[-1]
    per_round = num_env_runners * 8 * config.get_rollout_fragment_length()
    rounds = -(-256 // per_round)  # rounds per iteration to reach train_batch_size
    assert last["env_steps_dropped"] == 0, last
    assert last["num_samples_dropped"] == 0, last
    assert last["num_samples_late"] == 0, last
    # every sampled step was trained on, and each iteration took one full round
    assert last["env_steps_trained"] == last["env_steps_sampled"] == 6 * per_round * rounds
    assert [r["iteration"] for r in results] == list(range(1, 7))


def test_the_same_seed_gives_the_same_weights_with_several_runners(make_cluster):
    cluster = make_cluster(slots=2)
    weights = []
    for run in range(2):
        config = load_job(CARTPOLE_JOB).config
        config.env_runners(num_env_runners=2).debugging(seed=3)
        algo = config.build(client=cluster.client(), job_name=f"seeded{run}")
        try:
            for _ in range(8):
                algo.train()
            weights.append(algo.get_weights()[1])
        finally:
            algo.stop()
    assert np.array_equal(weights[0], weights[1])
