"""The learner group's update loop: retried whole until it commits, but never forever."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ftrl.rl import learner_group as lg
from ftrl.wire.errors import ActorError


def _fragment(t: int = 8, e: int = 2) -> dict[str, np.ndarray]:
    """Time-major [T, E] like an env runner's fragment."""
    return {"obs": np.zeros((t, e, 4), np.float32), "rewards": np.zeros((t, e), np.float32),
            "valid": np.ones((t, e), bool)}


def _group(outcomes: list[dict[str, BaseException]]) -> tuple[lg.LearnerGroup, list[int]]:
    """A group whose members answer each update attempt with the next outcome
    (errors by member; an empty dict means every member committed)."""
    group = object.__new__(lg.LearnerGroup)
    group.config = SimpleNamespace(training_cfg=SimpleNamespace(minibatch_size=4))
    group.group = "job/learner"
    group.version = 7
    group.num_update_retries = 0
    group._consecutive_failures = 0
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
    return {"job/learner/1": ActorError("ftrl.rl.mesh.CollectiveTimeout", "allreduce timed out")}


def test_update_commits_after_collateral_failures():
    group, epochs = _group([_collateral(), _collateral(), {}])
    out = group.update([_fragment(), _fragment()])
    assert out["update_retries"] == 2
    assert out["weights_version"] == 8 and group.version == 8
    assert len(epochs) == 3  # each attempt asked for a ready view again


def test_update_that_only_fails_collaterally_gives_up():
    group, epochs = _group([_collateral()])
    with pytest.raises(lg.LearnerGroupError, match="failed 25 times in a row"):
        group.update([_fragment()])
    assert len(epochs) == lg.MAX_UPDATE_ATTEMPTS
    assert group.version == 7  # nothing committed


def test_a_learner_that_keeps_raising_ends_the_run():
    own = {"job/learner/0": ActorError("ValueError", "bad batch")}
    group, epochs = _group([own])
    with pytest.raises(lg.LearnerGroupError, match="learner job/learner/0 failed 20 times"):
        group.update([_fragment()])
    assert len(epochs) == lg.MAX_CONSECUTIVE_FAILURES
