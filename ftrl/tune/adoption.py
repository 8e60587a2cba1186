"""What a starting tuner (the first, or one restarted in place, or after `Tuner.restore`)
makes of each trial experiment.json holds, given the trial's job record on the cluster
(None: the coordinator does not know the job). A pure function, tested without a cluster;
the tuner applies the answer, then makes again the exploits decided but maybe not taken
(`ftrl.tune.exploit.Exploits.reissue`). Imports no torch and no client.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from ftrl.coordinator.jobs import JobStage
from ftrl.tune.experiment import PAUSED_TO_YIELD, TrialStatus

#: The job stages after which nothing runs for the job.
JOB_ENDED = frozenset(stage for stage in JobStage if stage.final)


class Adoption(StrEnum):
    """What becomes of one trial when a tuner starts."""

    KEEP = "keep"  # as it was: PENDING, waiting for its turn (PAUSED to yield) or ended, or RUNNING with its job running
    FOLLOW = "follow"  # PENDING or PAUSED, but an earlier incarnation left its job running: RUNNING
    TERMINATED = "terminated"  # RUNNING, and its job finished while no tuner watched
    REQUEUE = "requeue"  # RUNNING, but its job does not run: to the front of the queue (not pre-empted)
    RESUME = "resume"  # PAUSED (the experiment was stopped): PENDING, to resume from its checkpoint


def job_runs(job: Mapping[str, Any] | None) -> bool:
    """Whether a job record is of a job that has not ended."""
    return job is not None and job["stage"] not in JOB_ENDED


def adoption(status: TrialStatus, job: Mapping[str, Any] | None, paused_because: str = "") -> Adoption:
    """What a starting tuner does with a trial of `status` whose job record is `job` (a
    PAUSED one: why, `Trial.paused_because`; one that yielded its turn keeps waiting)."""
    live = job_runs(job)
    if status == TrialStatus.RUNNING and not live:
        if job is not None and job["stage"] == JobStage.FINISHED:
            return Adoption.TERMINATED
        return Adoption.REQUEUE
    if status in (TrialStatus.PAUSED, TrialStatus.PENDING) and live and not job.get("stop_requested"):
        return Adoption.FOLLOW
    if status == TrialStatus.PAUSED and paused_because != PAUSED_TO_YIELD:
        return Adoption.RESUME
    return Adoption.KEEP
