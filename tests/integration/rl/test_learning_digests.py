"""Learning is bit for bit what it was before the restructures. PPO: the sha256 of parameters,
Adam's moments and counters after N updates on seeded fragments equal the digests
recorded on 36f3c3f (tests/fixtures/ppo_digests.json, by record_ppo_digests.py), in the
driver and on two learner actors over gloo. IMPALA and whole deterministic runs: the
digests recorded on c79197e before the rooms restructure of issue 34
(tests/fixtures/learning_digests.json, by record_learning_digests.py). APPO: recorded
after its surrogate's importance weight was fixed (tests/fixtures/appo_digests.json).

Digests are bit for bit, so they hold per platform (CPU vendor and vector width pick
the float kernels): each fixture keeps a set per platform, and a platform without one
skips (tests/fixtures/digest_platform.py). The AMD sets are the commits named above;
the Intel AVX-512 set was recorded where its `recorded_at` says, with PPO's and IMPALA's
code unchanged since those commits (the AMD sets pass on it)."""

from __future__ import annotations

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
from tests.fixtures.digest_platform import load, platform_key, recorded, recorded_or_none
from tests.fixtures.learning_cases import (
    LEARNER_CASES,
    RUN_CASES,
    in_driver_learner_digest,
    run_digest,
    two_learner_digest,
)

RECORDED = load("ppo_digests.json")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", SEEDS)
def test_the_in_driver_learner_gives_the_recorded_digests(case, seed):
    one_torch_thread()
    learner = PPOLearner(config_for(case, seed, num_learners=0), SpaceSpec.from_dict(CASES[case]))
    for update in range(N_UPDATES):
        learner.update(fragments_for(case, seed, update), env_steps_sampled=1024 * update)
    expected = recorded(RECORDED, "in_driver", f"{case}/{seed}")
    assert learner.digest() == expected


def test_two_learners_over_gloo_give_the_recorded_digests():
    expected = {seed: recorded(RECORDED, "two_learners_gloo", f"cartpole/{seed}") for seed in SEEDS}
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
                assert set(digests.values()) == {expected[seed]}, seed
        finally:
            client.close()


# ---------------------------------------------------------------------------- IMPALA, APPO and whole runs
# recorded on c79197e, before the rooms restructure (tests/fixtures/learning_cases.py)

RECORDED_C79197E = load("learning_digests.json")
RECORDED_APPO = load("appo_digests.json")


def _fixture(key: str) -> dict:
    """IMPALA's and PPO's from c79197e, APPO's from after its surrogate fix."""
    return RECORDED_APPO if key.split("/")[0] == "APPO" else RECORDED_C79197E


def _recorded(section: str, key: str):
    return recorded(_fixture(key), section, key)


@pytest.mark.parametrize(("algo", "case"), LEARNER_CASES)
def test_impala_and_appo_learners_give_the_recorded_digests(algo, case):
    for seed in SEEDS:
        expected = _recorded("learner_in_driver", f"{algo}/{case}/{seed}")
        assert in_driver_learner_digest(algo, case, seed) == expected, seed


@pytest.mark.timeout(600)
def test_two_learners_and_deterministic_runs_give_the_recorded_digests():
    """Two IMPALA/APPO learner actors over gloo on the seeded fragments; whole runs
    (IMPALA and APPO deterministic, learner in the driver or two over gloo; PPO sampling
    in its driver), seeds 0-2: digests, weights and every iteration's figures."""
    # the cases this platform has digests for (an AMD machine has no APPO ones: digest_platform)
    two = {(algo, seed): recorded_or_none(_fixture(algo), "learner_two_gloo", f"{algo}/cartpole/{seed}")
           for algo in ("IMPALA", "APPO") for seed in SEEDS}
    runs = {(algo, n, seed): recorded_or_none(_fixture(algo), "runs", f"{algo}/{n}/{seed}")
            for algo, n in RUN_CASES for seed in SEEDS}
    two = {k: v for k, v in two.items() if v is not None}
    runs = {k: v for k, v in runs.items() if v is not None}
    if not two and not runs:
        pytest.skip(f"no digests recorded for this platform ({platform_key()})")
    with new_cluster(workers=1, slots=6) as cluster:
        client = cluster.client()
        try:
            for (algo, seed), expected in two.items():
                got = two_learner_digest(client, algo, seed, f"lg{algo.lower()}{seed}")
                assert got == expected, (algo, seed)
            for (algo, num_learners, seed), expected in runs.items():
                got = run_digest(client, algo, num_learners, seed, f"run{algo.lower()}{num_learners}s{seed}")
                assert got == expected, (algo, num_learners, seed)
        finally:
            client.close()
