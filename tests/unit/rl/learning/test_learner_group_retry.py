"""The learner group's update loop: retried whole until it commits, but never forever;
its learners' starts retried with a bound; its mesh epochs entered with a bound, and
a coordinator outage outlived where it can be."""

from __future__ import annotations

import concurrent.futures as cf
import time
from typing import Any

import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.actor_group import ActorSlot
from ftrl.rl.learning import learner_group as lg
from ftrl.rl.learning.learner_health import LearnerHealth
from ftrl.rl.learning.learner_mesh import CommittedState, LearnerMesh
from ftrl.rl.learning.learner_starts import LearnerStarts
from ftrl.wire.errors import ActorError, ActorStartError, ActorUnavailableError
from tests.fixtures.digest_inputs import CASES


def _fragment(t: int = 8, e: int = 2) -> dict[str, np.ndarray]:
    """Time-major [T, E] like an env runner's fragment."""
    return {"obs": np.zeros((t, e, 4), np.float32), "rewards": np.zeros((t, e), np.float32),
            "valid": np.ones((t, e), bool)}


class _Mesh:
    """A learner mesh whose members answer each update attempt with the next outcome
    (errors by member; an empty dict means every member committed)."""

    def __init__(self, outcomes: list[dict[str, BaseException]]) -> None:
        self.outcomes = outcomes
        self.members = [{"name": "job/learner/0"}, {"name": "job/learner/1"}]
        self.epochs: list[int] = []
        self.attempts = 0

    def ready_view(self, committed: CommittedState) -> dict[str, Any]:
        self.epochs.append(10 + self.attempts)
        return {"epoch": 10 + self.attempts, "members": self.members}

    def call_all(self, members, method, args_for):
        assert method == "update"
        outcome = self.outcomes[min(self.attempts, len(self.outcomes) - 1)]
        self.attempts += 1
        if outcome:
            return {}, outcome
        return {m["name"]: {"policy_loss": 1.0} for m in members}, {}

    def after_failed_step(self, view, errors) -> None:
        pass


def _group(outcomes: list[dict[str, BaseException]]) -> tuple[lg.LearnerGroup, list[int]]:
    """A learner group of two (no actors: nothing is started) on a mesh of `_Mesh`."""
    config = (PPOConfig().environment("CartPole-v1").training(train_batch_size=16, minibatch_size=4)
              .learners(num_learners=2))
    group = lg.LearnerGroup(_NoCluster(), config, job_name="job", space_spec=CASES["cartpole"],
                            learner_class="ftrl.rl.algorithms.ppo:PPOLearner")
    group.resume_at(7, None)  # the committed version the updates start from
    group.mesh = mesh = _Mesh(outcomes)
    return group, mesh.epochs


class _NoCluster:
    """A client no test call reaches: the groups here create no actors."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the cluster was asked for {name}")


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


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _failing_creations(outcomes: list[BaseException | None]) -> tuple[LearnerStarts, list[ActorSlot], list[str],
                                                                      _Clock]:
    """The starts of a group with one slot whose creations end with the next outcome
    (None: started): (starts, slots, names created, clock)."""
    slots = [ActorSlot(index=0, name="job/learner/0")]
    created: list[str] = []

    def create_all(slots_):
        futs = {}
        for slot in slots_:
            fut = cf.Future()
            outcome = outcomes[min(len(created), len(outcomes) - 1)]
            created.append(slot.name)
            if outcome is None:
                fut.set_result(None)
            else:
                fut.set_exception(outcome)
            futs[slot.name] = fut
        return futs

    clock = _Clock()
    starts = LearnerStarts("job/learner", create_all=create_all, on_started=lambda name: None, clock=clock)
    starts.begin(slots)
    return starts, slots, created, clock


def _due(clock: _Clock) -> None:
    clock.now += 60.0  # the pause is over


def test_a_learner_that_failed_to_start_is_created_again_and_the_streak_resets():
    failed = ActorStartError("actor job/learner/0 failed to start: OSError: port in use")
    starts, slots, created, clock = _failing_creations([failed, failed, None])
    starts.poll(slots)
    assert created == ["job/learner/0"] and "job/learner/0" in starts.recreate_at
    starts.poll(slots)
    assert len(created) == 1  # not before its pause ended
    _due(clock)
    starts.poll(slots)  # created again: fails again
    starts.poll(slots)
    assert len(created) == 2 and starts.start_failures["job/learner/0"] == 2
    _due(clock)
    starts.poll(slots)
    starts.poll(slots)
    assert len(created) == 3 and not starts.start_failures and not starts.recreate_at


def test_a_learner_that_never_starts_ends_the_run_with_its_error():
    starts, slots, created, clock = _failing_creations([ActorStartError("actor job/learner/0 failed to start: boom")])
    with pytest.raises(lg.LearnerGroupError, match=rf"failed to start {lg.MAX_START_FAILURES} times in a row; last: .*boom"):
        for _ in range(3 * lg.MAX_START_FAILURES):
            starts.poll(slots)
            _due(clock)
    assert len(created) == lg.MAX_START_FAILURES


def test_a_refused_learner_is_not_created_again():
    starts, slots, created, _ = _failing_creations(
        [ActorStartError("mesh job/learner refused job/learner/0: config hash differs")])
    with pytest.raises(lg.LearnerGroupError, match="refused by the mesh"):
        starts.poll(slots)
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


class _EnteredBy(LearnerMesh):
    """A mesh of two learners on `coordinator`, whose epochs are entered by
    `enter_with(mesh, view)` (no learner actors)."""

    def __init__(self, coordinator: _Coordinator, enter_with) -> None:
        super().__init__(coordinator, "job/learner", pinned=_no_actor, health=LearnerHealth("job/learner", lambda name: {}),
                         n_init=2, min_learners=2, wait_timeout_s=3.0, collective_timeout_s=30.0,
                         call_timeout_s=90.0, first_epoch_timeout_s=3.0)
        self.enter_with = enter_with

    def enter(self, view: dict[str, Any], committed: CommittedState) -> bool:
        return self.enter_with(self, view)


def _no_actor(name: str, incarnation: int) -> Any:
    raise AssertionError(f"no learner actor is called here ({name})")


def test_epochs_that_cannot_be_entered_end_the_run_after_a_bound():
    coordinator = _Coordinator()
    tried: list[int] = []

    def enter(mesh, view):  # e.g. enter_epoch keeps timing out collaterally
        tried.append(view["epoch"])
        mesh.spent.add(view["epoch"])
        return False

    mesh = _EnteredBy(coordinator, enter)
    with pytest.raises(lg.LearnerGroupError, match="could not be entered"):
        mesh.ready_view(CommittedState())
    assert len(tried) == lg.MAX_UPDATE_ATTEMPTS
    assert tried == sorted(set(tried))  # a fresh epoch each time, never one entered twice


def test_a_coordinator_outage_while_the_mesh_must_reform_waits_then_times_out():
    coordinator = _Coordinator()
    coordinator.down = True
    mesh = _EnteredBy(coordinator, lambda mesh, view: pytest.fail("nothing to enter while it is down"))
    t0 = time.monotonic()
    with pytest.raises(lg.LearnerWaitTimeout, match="coordinator is unreachable"):
        mesh.ready_view(CommittedState())
    assert 2.5 < time.monotonic() - t0 < 30


def test_a_coordinator_outage_in_an_entered_epoch_goes_on_in_it():
    coordinator = _Coordinator()

    def enter(mesh, view):
        mesh.entered_epoch, mesh.view = view["epoch"], view
        return True

    mesh = _EnteredBy(coordinator, enter)
    view = mesh.ready_view(CommittedState())
    coordinator.down = True
    assert mesh.ready_view(CommittedState()) is view
