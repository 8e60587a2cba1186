"""PPO learns bit for bit as it did before the rl/ restructure: the sha256 of parameters,
Adam's moments and counters after N updates on seeded fragments equal the digests
recorded on 36f3c3f (tests/fixtures/ppo_digests.json, by record_ppo_digests.py), in the
driver and on two learner actors over gloo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.learning.learner_group import LearnerGroup
from ftrl.rl.spaces import SpaceSpec
from tests.cluster import new_cluster
from tests.fixtures.digest_inputs import (
    CASES,
    N_UPDATES,
    SEEDS,
    config_for,
    fragments_for,
    one_torch_thread,
)

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "ppo_digests.json").read_text())


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", SEEDS)
def test_the_in_driver_learner_gives_the_recorded_digests(case, seed):
    one_torch_thread()
    learner = PPOLearner(config_for(case, seed, num_learners=0), SpaceSpec.from_dict(CASES[case]))
    for update in range(N_UPDATES):
        learner.update(fragments_for(case, seed, update), env_steps_sampled=1024 * update)
    assert learner.digest() == RECORDED["in_driver"][f"{case}/{seed}"]


def test_two_learners_over_gloo_give_the_recorded_digests():
    with new_cluster(workers=1, slots=6) as cluster:
        client = cluster.client()
        try:
            for seed in SEEDS:
                group = LearnerGroup(client, config_for("cartpole", seed, num_learners=2),
                                     job_name=f"digests{seed}", space_spec=CASES["cartpole"],
                                     learner_class="ftrl.rl.algorithms.ppo:PPOLearner")
                group.start()
                try:
                    for update in range(N_UPDATES):
                        group.update(fragments_for("cartpole", seed, update), env_steps_sampled=1024 * update)
                    digests = group.digests()
                finally:
                    group.stop()
                assert len(digests) == 2
                assert set(digests.values()) == {RECORDED["two_learners_gloo"][f"cartpole/{seed}"]}, seed
        finally:
            client.close()
