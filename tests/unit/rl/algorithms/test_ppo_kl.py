"""PPO's KL term (`use_kl_loss`, `kl_coeff`, `kl_target`, RLlib's keys and its adaptive
rule): in the loss only when on, the coefficient adapted after every update from the
update's mean KL, and kept in the learner's state and counters."""

from __future__ import annotations

import pytest

from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.spaces import SpaceSpec
from tests.fixtures.digest_inputs import CASES, config_for, fragments_for, one_torch_thread


def learner(**training) -> PPOLearner:
    one_torch_thread()
    return PPOLearner(config_for("cartpole", 0, 0).training(**training), SpaceSpec.from_dict(CASES["cartpole"]))


def updates(ppo: PPOLearner, n: int = 3) -> list[dict]:
    return [ppo.update(fragments_for("cartpole", 0, u), env_steps_sampled=1024 * u) for u in range(n)]


@pytest.mark.parametrize("kl_target, factor", [(1e-9, 1.5), (10.0, 0.5)])
def test_the_coefficient_grows_above_twice_the_target_and_shrinks_below_half(kl_target, factor):
    ppo = learner(use_kl_loss=True, kl_coeff=0.2, kl_target=kl_target)
    rows = updates(ppo)
    assert all(r["kl"] > 0 for r in rows)
    assert [r["kl_coeff"] for r in rows] == pytest.approx([0.2 * factor ** (i + 1) for i in range(3)])


def test_the_term_changes_learning_only_when_on():
    plain = learner()
    updates(plain)
    off = learner(use_kl_loss=False, kl_coeff=5.0)
    rows = updates(off)
    assert off.digest() == plain.digest() and "kl_coeff" not in rows[-1]  # off: as before, nothing added
    zero = learner(use_kl_loss=True, kl_coeff=0.0)
    updates(zero)
    strong = learner(use_kl_loss=True, kl_coeff=5.0, kl_target=1.0)
    updates(strong)
    assert strong.model.get_flat().tolist() != zero.model.get_flat().tolist()
    assert zero.model.get_flat().tolist() == plain.model.get_flat().tolist()  # a zero weight adds nothing


def test_the_adapted_coefficient_is_learner_state():
    ppo = learner(use_kl_loss=True, kl_coeff=0.2, kl_target=1e-9)
    updates(ppo, 2)
    assert ppo.kl_coeff == pytest.approx(0.45)
    restored = learner(use_kl_loss=True, kl_coeff=0.2, kl_target=1e-9)
    restored.set_state(ppo.get_state())
    assert restored.kl_coeff == pytest.approx(0.45)
    joined = learner(use_kl_loss=True, kl_coeff=0.2, kl_target=1e-9)
    joined.set_counters(ppo.counters_tensor())  # what a mesh broadcasts to a new member
    assert joined.kl_coeff == pytest.approx(0.45) and joined.version == ppo.version
