"""The learner group's update loop: retried whole until it commits, but never forever."""

from __future__ import annotations

import concurrent.futures as cf
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.learning import learner_group as lg
from ftrl.wire.errors import ActorError, ActorStartError, ActorUnavailableError


def _fragment(t: int = 8, e: int = 2) -> dict[str, np.ndarray]:
    """Time-major [T, E] like an env runner's fragment."""
    return {"obs": np.zeros((t, e, 4), np.float32), "rewards": np.zeros((t, e), np.float32),
            "valid": np.ones((t, e), bool)}


def _group(outcomes: list[dict[str, BaseException]]) -> tuple[lg.LearnerGroup, list[int]]:
    """A group whose members answer each update attempt with the next outcome
    (errors by member; an empty dict means every member committed)."""
    group = object.__new__(lg.LearnerGroup)
    group.config = SimpleNamespace(training_cfg=SimpleNamespace(minibatch_size=4))
    group.learner_cls = PPOLearner
    group.group = "job/learner"
    group.version = 7
    group.num_update_retries = group.num_learner_failures = 0
    group._consecutive_failures, group._failed = 0, set()
    members = [{"name": "job/learner/0"}, {"name": "job/learner/1"}]
    epochs: list[int] = []
    attempt = {"n": 0}

    def ready_view() -> dict[str, Any]:
        epochs.append(10 + attempt["n"])
        return {"epoch": 10 + attempt["n"], "members": members}

    def call_all(members_, method, args_for):
        assert method == "update"
        outcome = outcomes[min(attempt["n"], len(outcomes) - 1)]
        attempt["n"] += 1
        if outcome:
            return {}, outcome
        return {m["name"]: {"policy_loss": 1.0} for m in members_}, {}

    group._ready_view = ready_view
    group._call_all = call_all
    group._after_failed_step = lambda view, errors: None
    return group, epochs


def _collateral() -> dict[str, BaseException]:
    return {"job/learner/1": ActorError("ftrl.rl.learning.mesh.CollectiveTimeout", "allreduce timed out")}


def test_update_commits_after_collateral_failures():
    group, epochs = _group([_collateral(), _collateral(), {}])
    out = group.update([_fragment(), _fragment()])
    assert out["update_retries"] == 2
    assert out["weights_version"] == 8 and group.version == 8
    assert len(epochs) == 3  # each attempt asked for a ready view again


def test_update_that_only_fails_collaterally_gives_up():
    group, epochs = _group([_collateral()])
    with pytest.raises(lg.LearnerGroupError, match=f"failed {lg.MAX_UPDATE_ATTEMPTS} times in a row"):
        group.update([_fragment()])
    assert len(epochs) == lg.MAX_UPDATE_ATTEMPTS
    assert group.version == 7  # nothing committed


def test_a_learner_that_keeps_raising_ends_the_run():
    own = {"job/learner/0": ActorError("ValueError", "bad batch")}
    group, epochs = _group([own])
    with pytest.raises(lg.LearnerGroupError, match=f"learner job/learner/0 failed {lg.MAX_CONSECUTIVE_FAILURES} times"):
        group.update([_fragment()])
    assert len(epochs) == lg.MAX_CONSECUTIVE_FAILURES


def _failing_creations(outcomes: list[BaseException | None]) -> tuple[lg.LearnerGroup, list[str]]:
    """A group with one slot whose creations end with the next outcome (None: started)."""
    group = object.__new__(lg.LearnerGroup)
    group.group = "job/learner"
    group.slots = [lg.ActorSlot(index=0, name="job/learner/0")]
    group._creating, group._start_failures, group._recreate_at = {}, {}, {}
    created: list[str] = []

    def create_all(slots):
        futs = {}
        for slot in slots:
            fut = cf.Future()
            outcome = outcomes[min(len(created), len(outcomes) - 1)]
            created.append(slot.name)
            if outcome is None:
                fut.set_result(None)
            else:
                fut.set_exception(outcome)
            futs[slot.name] = fut
        return futs

    group.create_all = create_all
    group._creating.update(create_all(group.slots))
    return group, created


def _due(group: lg.LearnerGroup) -> None:
    group._recreate_at = {name: 0.0 for name in group._recreate_at}  # the pause is over


def test_a_learner_that_failed_to_start_is_created_again_and_the_streak_resets():
    failed = ActorStartError("actor job/learner/0 failed to start: OSError: port in use")
    group, created = _failing_creations([failed, failed, None])
    group._check_creations()
    assert created == ["job/learner/0"] and "job/learner/0" in group._recreate_at
    group._check_creations()
    assert len(created) == 1  # not before its pause ended
    _due(group)
    group._check_creations()  # created again: fails again
    group._check_creations()
    assert len(created) == 2 and group._start_failures["job/learner/0"] == 2
    _due(group)
    group._check_creations()
    group._check_creations()
    assert len(created) == 3 and not group._start_failures and not group._recreate_at


def test_a_learner_that_never_starts_ends_the_run_with_its_error():
    group, created = _failing_creations([ActorStartError("actor job/learner/0 failed to start: boom")])
    with pytest.raises(lg.LearnerGroupError, match=rf"failed to start {lg.MAX_START_FAILURES} times in a row; last: .*boom"):
        for _ in range(3 * lg.MAX_START_FAILURES):
            group._check_creations()
            _due(group)
    assert len(created) == lg.MAX_START_FAILURES


def test_a_refused_learner_is_not_created_again():
    group, created = _failing_creations([ActorStartError("mesh job/learner refused job/learner/0: config hash differs")])
    with pytest.raises(lg.LearnerGroupError, match="refused by the mesh"):
        group._check_creations()
    assert len(created) == 1


class _Coordinator:
    """The mesh calls of a coordinator: epochs open on form_mesh; `down` makes every
    call fail as if the coordinator were unreachable."""

    def __init__(self) -> None:
        self.epoch, self.seq, self.down = 1, 1, False
        self.members = [{"name": f"job/learner/{i}", "incarnation": 1} for i in range(2)]

    def _view(self) -> dict[str, Any]:
        if self.down:
            raise ActorUnavailableError("coordinator at 127.0.0.1:1 unreachable")
        return {"epoch": self.epoch, "seq": self.seq, "members": self.members, "waiting": []}

    def get_mesh(self, group, after_seq=-1, wait_s=0.0):
        return self._view()

    def form_mesh(self, group, expected_epoch, min_size=1, remove=None, reason="", reform=False):
        view = self._view()
        if expected_epoch == self.epoch:
            self.epoch += 1
            self.seq += 1
            view = self._view()
        return view


def _mesh_group(coordinator: _Coordinator, enter) -> lg.LearnerGroup:
    group = object.__new__(lg.LearnerGroup)
    group.group, group.client = "job/learner", coordinator
    group.n_init = group.min_learners = 2
    group.wait_timeout, group._entered_any = 3.0, True  # this driver entered an epoch before
    group.entered_epoch, group._spent, group.view = 0, set(), {}
    group._consecutive_failures = group.num_learner_failures = 0
    group._failed = set()
    group._incarnations = {f"job/learner/{i}": (1, 0) for i in range(2)}
    group._check_creations = lambda: None
    group._apply_scale = lambda view: view
    group._enter = enter
    return group


def test_epochs_that_cannot_be_entered_end_the_run_after_a_bound():
    coordinator = _Coordinator()
    tried: list[int] = []

    def enter(view):  # e.g. enter_epoch keeps timing out collaterally
        tried.append(view["epoch"])
        group._spent.add(view["epoch"])
        return False

    group = _mesh_group(coordinator, enter)
    with pytest.raises(lg.LearnerGroupError, match="could not be entered"):
        group._ready_view()
    assert len(tried) == lg.MAX_UPDATE_ATTEMPTS
    assert tried == sorted(set(tried))  # a fresh epoch each time, never one entered twice


def test_a_coordinator_outage_while_the_mesh_must_reform_waits_then_times_out():
    coordinator = _Coordinator()
    coordinator.down = True
    group = _mesh_group(coordinator, lambda view: pytest.fail("nothing to enter while it is down"))
    t0 = time.monotonic()
    with pytest.raises(lg.LearnerWaitTimeout, match="coordinator is unreachable"):
        group._ready_view()
    assert 2.5 < time.monotonic() - t0 < 30


def test_a_coordinator_outage_in_an_entered_epoch_goes_on_in_it():
    coordinator = _Coordinator()
    entered = _mesh_group(coordinator, lambda view: True)
    view = entered._ready_view()
    entered.entered_epoch, entered.view = view["epoch"], view
    coordinator.down = True
    assert entered._ready_view() is view
