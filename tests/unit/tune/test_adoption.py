"""ftrl.tune.adoption: what a starting tuner makes of each trial, from its job record."""

from __future__ import annotations

import pytest

from ftrl.tune.adoption import Adoption, adoption, job_runs
from ftrl.tune.experiment import TrialStatus as S


def job(stage: str, stop_requested: bool = False) -> dict:
    return {"job_id": "t", "stage": stage, "stop_requested": stop_requested}


@pytest.mark.parametrize(("status", "record", "expected"), [
    (S.RUNNING, job("RUNNING"), Adoption.KEEP),  # followed on
    (S.RUNNING, job("RECOVERING"), Adoption.KEEP),
    (S.RUNNING, job("FINISHED"), Adoption.TERMINATED),  # ended while no tuner watched
    (S.RUNNING, job("STOPPED"), Adoption.REQUEUE),
    (S.RUNNING, job("FAILED"), Adoption.REQUEUE),
    (S.RUNNING, None, Adoption.REQUEUE),  # the coordinator lost it
    (S.PAUSED, None, Adoption.RESUME),
    ((S.PAUSED, "yielded its turn"), job("STOPPED"), Adoption.KEEP),  # it waits for its turn, as it did
    ((S.PAUSED, "yielded its turn"), job("RUNNING", stop_requested=True), Adoption.KEEP),
    ((S.PAUSED, "experiment stopped"), job("STOPPED"), Adoption.RESUME),
    (S.PAUSED, job("STOPPED"), Adoption.RESUME),
    (S.PAUSED, job("RUNNING"), Adoption.FOLLOW),  # left running by an earlier incarnation
    (S.PAUSED, job("RUNNING", stop_requested=True), Adoption.RESUME),  # still stopping: wait in the queue
    (S.PENDING, job("STARTING"), Adoption.FOLLOW),
    (S.PENDING, job("RUNNING", stop_requested=True), Adoption.KEEP),
    (S.PENDING, None, Adoption.KEEP),
    (S.TERMINATED, job("RUNNING"), Adoption.KEEP),
    (S.ERROR, job("FAILED"), Adoption.KEEP),
])
def test_adoption(status, record, expected):
    status, why = status if isinstance(status, tuple) else (status, "")
    assert adoption(status, record, why) == expected


def test_job_runs():
    assert job_runs(job("PENDING")) and job_runs(job("RECOVERING"))
    assert not any(job_runs(job(s)) for s in ("FINISHED", "STOPPED", "FAILED"))
    assert not job_runs(None)
