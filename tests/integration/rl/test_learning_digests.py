"""Learning is bit for bit what it was before the restructures. PPO: the sha256 of parameters,
Adam's moments and counters after N updates on seeded fragments equal the digests
recorded on 36f3c3f (tests/fixtures/ppo_digests.json, by record_ppo_digests.py), in the
driver and on two learner actors over gloo. IMPALA, APPO and whole deterministic runs:
the digests recorded on c79197e before the rooms restructure of issue 34
(tests/fixtures/learning_digests.json, by record_learning_digests.py)."""

from __future__ import annotations

import json

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
from tests.fixtures.learning_cases import (
    LEARNER_CASES,
    RUN_CASES,
    in_driver_learner_digest,
    run_digest,
    two_learner_digest,
)
from tests.procs import REPO

RECORDED = json.loads((REPO / "tests" / "fixtures" / "ppo_digests.json").read_text())


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


# ---------------------------------------------------------------------------- IMPALA, APPO and whole runs
# recorded on c79197e, before the rooms restructure (tests/fixtures/learning_cases.py)

RECORDED_C79197E = json.loads((REPO / "tests" / "fixtures" / "learning_digests.json").read_text())


@pytest.mark.parametrize(("algo", "case"), LEARNER_CASES)
def test_impala_and_appo_learners_give_the_recorded_digests(algo, case):
    for seed in SEEDS:
        assert in_driver_learner_digest(algo, case, seed) == RECORDED_C79197E["learner_in_driver"][
            f"{algo}/{case}/{seed}"], seed


@pytest.mark.timeout(600)
def test_two_learners_and_deterministic_runs_give_the_recorded_digests():
    """Two IMPALA/APPO learner actors over gloo on the seeded fragments; whole runs
    (IMPALA and APPO deterministic, learner in the driver or two over gloo; PPO sampling
    in its driver), seeds 0-2: digests, weights and every iteration's figures."""
    with new_cluster(workers=1, slots=6) as cluster:
        client = cluster.client()
        try:
            for algo in ("IMPALA", "APPO"):
                for seed in SEEDS:
                    got = two_learner_digest(client, algo, seed, f"lg{algo.lower()}{seed}")
                    assert got == RECORDED_C79197E["learner_two_gloo"][f"{algo}/cartpole/{seed}"], (algo, seed)
            for algo, num_learners in RUN_CASES:
                for seed in SEEDS:
                    key = f"{algo}/{num_learners}/{seed}"
                    got = run_digest(client, algo, num_learners, seed, f"run{algo.lower()}{num_learners}s{seed}")
                    assert got == RECORDED_C79197E["runs"][key], key
        finally:
            client.close()
