"""Jobs on the client side: every accepted config form to the job dict, checks of the
arguments of the jobs API, and the stage names.

A job dict is what `SubmitJobRequest.config` carries (msgpack) and what the driver
(`ftrl.rl.driver.actor:AlgorithmDriver`) takes: `config.to_dict()` (flat keys plus `algo`)
and a `stop` table. This module imports no torch; `ftrl.config` loads lazily.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.convert import stage_name  # noqa: F401 (re-exported: the client names it here)
from ftrl.wire.errors import ConfigError, InvalidArgumentError

if TYPE_CHECKING:
    from ftrl.config import JobSpec, StopCriteria

JOB_STAGES = ("PENDING", "STARTING", "RUNNING", "RECOVERING", "FINISHED", "STOPPED", "FAILED")
FINAL_STAGES = frozenset({"FINISHED", "STOPPED", "FAILED"})
#: The largest runner or learner count `scale` takes (the coordinator's bound too).
MAX_SCALE = 10_000
_JOB_ID = re.compile(r"[A-Za-z0-9_.\-]{1,80}")


def job_to_dict(job: JobSpec) -> dict[str, Any]:
    """The job as the msgpack-able dict the coordinator and the driver take."""
    data = job.config.to_dict()
    data["stop"] = {k: v for k, v in dataclasses.asdict(job.stop).items() if v is not None}
    return data


def job_spec(config: Any, stop: Mapping[str, Any] | StopCriteria | None = None) -> JobSpec:
    """A validated JobSpec from any accepted form: an `AlgorithmConfig`, a `JobSpec`, a
    dict (a job file's content) or a path to a TOML job file. `stop` (a dict or a
    StopCriteria) is applied over the job's own [stop] table. Raises ConfigError
    (unknown keys name the nearest valid one)."""
    from ftrl.config import AlgorithmConfig, JobSpec, StopCriteria, load_job

    if isinstance(config, JobSpec):
        spec = JobSpec(config=config.config.copy(), stop=dataclasses.replace(config.stop))
    elif isinstance(config, AlgorithmConfig):
        spec = JobSpec(config=config.copy(), stop=StopCriteria())
    elif isinstance(config, Mapping):
        spec = load_job(data=config)
    elif isinstance(config, str | Path):
        spec = load_job(Path(config))
    else:
        raise ConfigError(f"a job is an AlgorithmConfig, a JobSpec, a dict or a TOML path, "
                          f"not {type(config).__name__}")
    if stop is not None:
        values = dataclasses.asdict(stop) if isinstance(stop, StopCriteria) else dict(stop)
        spec.stop.update({k: v for k, v in values.items() if v is not None})
    spec.config.validate()
    return spec


def job_config(config: Any, stop: Mapping[str, Any] | StopCriteria | None = None) -> dict[str, Any]:
    """The validated job dict of any accepted form (see `job_spec`)."""
    return job_to_dict(job_spec(config, stop))


def absolute_path(path: str | Path) -> str:
    """`path` made absolute against this process's working directory (`~` expanded)."""
    return str(Path(path).expanduser().absolute())


def check_job_id(job_id: str) -> str:
    """`job_id` if it is a valid job name ([A-Za-z0-9_.-], 1 to 80 characters)."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise InvalidArgumentError(
            f"job id {job_id!r} must be 1 to 80 characters of letters, digits, '_', '.', '-'")
    return job_id


def scale_count(what: str, value: int | None) -> int:
    """A wanted runner or learner count for ScaleJobRequest (None: -1, unchanged)."""
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an integer, got {value!r}")
    if not 0 <= value <= MAX_SCALE:
        raise InvalidArgumentError(f"{what} must be between 0 and {MAX_SCALE}, got {value}")
    return value


def stage_value(stage: str) -> int:
    """The JobStage enum value of a stage name ("RUNNING" or "JOB_RUNNING")."""
    name = str(stage).upper().removeprefix("JOB_")
    if name not in JOB_STAGES:
        raise InvalidArgumentError(f"unknown job stage {stage!r}; stages: {', '.join(JOB_STAGES)}")
    return pb.JobStage.Value(f"JOB_{name}")


def job_rows(rows: list[Mapping[str, Any]]) -> list[pb.JobResult]:
    """Metrics rows (each with its `iteration`) as JobResult messages."""
    from ftrl.wire import codec

    out = []
    for row in rows:
        try:
            iteration = operator.index(row["iteration"])
        except (TypeError, KeyError):
            raise InvalidArgumentError("a job result row is a dict with an integer 'iteration'") from None
        out.append(pb.JobResult(iteration=iteration,
                                row=codec.check_encodable(dict(row), "job result row")))
    return out
