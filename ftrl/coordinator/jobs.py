"""Jobs: records, the stage table, and what the coordinator does at each stage.

A job is its driver actor `JOB/algorithm` (ftrl.rl.driver.actor:AlgorithmDriver) plus the
runners and learners the driver creates under `JOB/`. The coordinator creates the
driver, follows it through its actor record and its ReportJob calls, and answers each
report with the wanted state (stop, runner and learner counts): it never calls into
the job, so a coordinator restart cannot leave a call half-made.

Stages, in one table (STAGE_TABLE): what a stage may become. Reports are stage-aware
(REPORT_ACCEPTED): a report that arrives in a stage that must ignore it (a job that
already ended, a driver incarnation that was replaced) is ignored on purpose and logged.

Reports may carry rows out of order: a driver's job link, back after an outage, reports
its current state and newest row first and the rows of the outage after it
(ftrl.rl.driver.job_link). Every row goes to the results store (by iteration: a later
`results(follow=False)` replays them all, in order), but the record never moves back:
its `metrics` (the row `ftrl status` shows) only changes to a row of an iteration not
below the one shown (`metrics_iteration`), and its `iteration` and `env_steps_sampled`
only go up (a driver resuming from an older checkpoint shows its progress again once it
is past them). A client following the results (`results(follow=True)`) streams in
iteration order and only moves forward: one that is following when such a report comes
gets the newest row and goes on from it, the rows of the outage arriving later are not
streamed to it (they are stored, and replayed by a new `results` call).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import msgpack

from ftrl.coordinator.events import EventLog
from ftrl.coordinator.records import ActorRecord, ActorState
from ftrl.coordinator.store import Batch
from ftrl.util.run_dir import DRIVER_STATE_FILE, has_saved_state
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    AlreadyExistsError,
    ConfigError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)

log = logging.getLogger(__name__)

DRIVER_CLASS = "ftrl.rl.driver.actor:AlgorithmDriver"
#: what a driver record made before the rl/ restructure names (ftrl.util.imports.MOVED_MODULES)
DRIVER_CLASSES = (DRIVER_CLASS, "ftrl.rl.driver:AlgorithmDriver")
DRIVER_MAX_RESTARTS = 20
MAX_LIVE_JOBS = 1000
MAX_ENDED_JOBS = 1000  # the oldest ended jobs are forgotten past this
MAX_COUNT = 10_000  # runners or learners a job may be scaled to
MAX_ROWS_PER_REPORT = 1000
MAX_ROW_BYTES = 256 << 10
HEALTH_CHECK_INTERVAL_S = 1.0
JOB_ID = re.compile(r"[A-Za-z0-9_.\-]{1,80}")


class JobStage(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    FINISHED = "FINISHED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"

    @property
    def proto(self) -> int:
        return pb.JobStage.Value(f"JOB_{self.value}")

    @property
    def final(self) -> bool:
        return self in (JobStage.FINISHED, JobStage.STOPPED, JobStage.FAILED)


S = JobStage
ENDS = frozenset({S.FINISHED, S.STOPPED, S.FAILED})
#: The stage table: every stage change goes through `JobTable._set_stage`, which
#: refuses (and logs) one that is not listed here.
STAGE_TABLE: dict[JobStage, frozenset[JobStage]] = {
    S.PENDING: frozenset({S.STARTING} | ENDS),
    S.STARTING: frozenset({S.RUNNING, S.RECOVERING} | ENDS),
    S.RUNNING: frozenset({S.RECOVERING} | ENDS),
    S.RECOVERING: frozenset({S.RUNNING} | ENDS),
    S.FINISHED: frozenset(),
    S.STOPPED: frozenset(),
    S.FAILED: frozenset(),
}
#: Which job stages take a driver's report (the others ignore it on purpose).
REPORT_ACCEPTED: frozenset[JobStage] = frozenset({S.STARTING, S.RUNNING, S.RECOVERING})
#: The stages a driver may report.
REPORTABLE = {pb.JOB_STARTING: S.STARTING, pb.JOB_RUNNING: S.RUNNING, pb.JOB_FINISHED: S.FINISHED,
              pb.JOB_STOPPED: S.STOPPED, pb.JOB_FAILED: S.FAILED}


@dataclass
class JobRecord:
    """What the coordinator keeps of one job (all of it is durable but `unhealthy_since`)."""

    job_id: str
    config: bytes  # msgpack map: the job dict
    output_dir: str
    num_env_runners: int
    num_learners: int
    stage: JobStage = JobStage.PENDING
    reason: str = ""
    iteration: int = 0
    env_steps_sampled: int = 0
    metrics: bytes = b"\x80"  # msgpack {}
    metrics_iteration: int = 0  # the iteration of the row in `metrics`
    stop_requested: bool = False
    resume: bool = False
    last_checkpoint: str = ""
    driver_incarnation: int = 0
    submitted_at: float = field(default_factory=time.time)
    stage_since: float = field(default_factory=time.time)
    seq: int = 1
    unhealthy_since: float | None = None  # monotonic; not durable

    @property
    def driver(self) -> str:
        return f"{self.job_id}/algorithm"

    def to_row(self) -> bytes:
        return msgpack.packb({
            "config": self.config, "output_dir": self.output_dir, "runners": self.num_env_runners,
            "learners": self.num_learners, "stage": self.stage.value, "reason": self.reason,
            "iteration": self.iteration, "env_steps": self.env_steps_sampled, "metrics": self.metrics,
            "metrics_iteration": self.metrics_iteration,
            "stop": self.stop_requested, "resume": self.resume, "checkpoint": self.last_checkpoint,
            "driver_incarnation": self.driver_incarnation, "submitted_at": self.submitted_at,
            "stage_since": self.stage_since, "seq": self.seq,
        })

    @classmethod
    def from_row(cls, job_id: str, row: bytes) -> JobRecord:
        d = msgpack.unpackb(row)
        metrics_iteration = d.get("metrics_iteration")  # missing in rows of older versions
        if metrics_iteration is None:
            metrics_iteration = row_iteration(d["metrics"])
        return cls(job_id=job_id, config=d["config"], output_dir=d["output_dir"],
                   num_env_runners=d["runners"], num_learners=d["learners"], stage=JobStage(d["stage"]),
                   reason=d["reason"], iteration=d["iteration"], env_steps_sampled=d["env_steps"],
                   metrics=d["metrics"], metrics_iteration=metrics_iteration, stop_requested=d["stop"],
                   resume=d["resume"], last_checkpoint=d["checkpoint"], driver_incarnation=d["driver_incarnation"],
                   submitted_at=d["submitted_at"], stage_since=d["stage_since"], seq=d["seq"])


def row_iteration(row: bytes) -> int:
    """The `iteration` of a stored metrics row (0 if it has none: the empty row)."""
    try:
        value = codec.decode(row, codec.SMALL_LIMITS).get("iteration")
    except Exception:  # not a map, or not decodable: nothing to keep it against
        return 0
    return value if isinstance(value, int) and value >= 0 else 0


def check_counts(env_runners: int, learners: int) -> None:
    for what, n in (("env runners", env_runners), ("learners", learners)):
        if n != -1 and not 0 <= n <= MAX_COUNT:
            raise InvalidArgumentError(f"cannot scale to {n} {what}: the count must be 0..{MAX_COUNT}")


def parse_job(config: bytes) -> tuple[dict, int, int]:
    """Validate a submitted job dict: (job dict, num_env_runners, num_learners)."""
    from ftrl.config import load_job  # torch-free

    try:
        data = codec.decode(config, codec.SMALL_LIMITS) if config else None
    except Exception as e:
        raise InvalidArgumentError(f"the job config is not a msgpack map: {e}") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError("the job config must be a map (a job file's content)")
    try:
        spec = load_job(data=data)
        spec.config.validate()
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"bad job config: {e}") from None
    return data, spec.config.env_runners_cfg.num_env_runners, spec.config.learners_cfg.num_learners


def driver_resources(data: dict) -> dict[str, float]:
    """What a job's driver actor takes (its `resources` section; 0 CPUs by default, so it
    fits on any worker)."""
    from ftrl.config import load_job  # torch-free

    return load_job(data=data).config.driver_resources()


@dataclass(frozen=True)
class JobHost:
    """All the job table uses of the controller, handed to it by the controller (this
    module never imports the controller): the actor records and the event log, the two
    actor operations a job needs, and its health limit. The operations run inside the
    controller's current durable call (they change records; the call writes them)."""

    actors: Mapping[str, ActorRecord]
    events: EventLog
    #: create the actor of this spec, or get the live one of its name
    get_or_create_actor: Callable[[pb.ActorSpec], ActorRecord]
    #: stop an actor for good: (name, reason)
    kill_actor: Callable[[str, str], ActorRecord]
    #: job_unhealthy_timeout_s, read at each health check
    unhealthy_timeout_s: Callable[[], float]


class JobTable:
    """The jobs of one coordinator; plain code on the controller's thread."""

    def __init__(self, host: JobHost) -> None:
        self.host = host
        self.jobs: dict[str, JobRecord] = {}
        self._dirty: set[str] = set()
        self._results: list[tuple[str, int, bytes]] = []
        self._drop_results: set[str] = set()
        self.jobs_dir: Path | None = None  # default output dirs (STATE_DIR/jobs)
        self.on_change = lambda job_id: None
        self._next_check = 0.0  # monotonic time of the next job-health check

    # ---------------------------------------------------------------- durable state

    def collect(self, batch: Batch) -> None:
        """Add this table's changes to the controller's transaction."""
        for job_id in self._dirty:
            job = self.jobs.get(job_id)
            batch.put("jobs", job_id, job.to_row() if job is not None else None)
        batch.results.extend(self._results)
        batch.drop_results |= self._drop_results
        self._dirty.clear()
        self._results = []
        self._drop_results = set()

    def restore(self, rows: dict[str, bytes]) -> None:
        """Load jobs after a coordinator restart and finish what each stage left open:
        PENDING and STARTING jobs get their driver (created if it is missing), RUNNING
        and RECOVERING ones go on with theirs, ended ones have their actors stopped."""
        for job_id, row in rows.items():
            self.jobs[job_id] = JobRecord.from_row(job_id, row)
        for job in self.jobs.values():
            if job.stage.final:
                self._cleanup(job)
                continue
            rec = self.host.actors.get(job.driver)
            if rec is None or rec.state == ActorState.DEAD:
                log.warning("job %s (%s): its driver has no live record; starting it", job.job_id,
                            job.stage.value)
                self._create_driver(job)
            log.info("job %s resumes in stage %s", job.job_id, job.stage.value)

    def _touch(self, job: JobRecord) -> None:
        job.seq += 1
        self._dirty.add(job.job_id)
        self.on_change(job.job_id)

    # ---------------------------------------------------------------- stages

    def _set_stage(self, job: JobRecord, stage: JobStage, reason: str = "") -> bool:
        if stage == job.stage:
            return False
        if stage not in STAGE_TABLE[job.stage]:
            log.info("job %s: %s -> %s is not a stage change the table allows; ignored",
                     job.job_id, job.stage.value, stage.value)
            return False
        log.log(logging.WARNING if stage in (S.FAILED, S.RECOVERING) else logging.INFO,
                "job %s: %s -> %s%s", job.job_id, job.stage.value, stage.value,
                f" ({reason})" if reason else "")
        job.stage = stage
        job.reason = reason
        job.stage_since = time.time()
        job.unhealthy_since = None
        self._touch(job)
        self.host.events.emit(pb.EVENT_JOB, actor=job.job_id,
                              message=f"{stage.value}: {reason}" if reason else stage.value)
        if stage.final:
            self._cleanup(job)
        return True

    def _live_actors(self, job_id: str, role: str = "") -> list[ActorRecord]:
        """The job's actors that are not DEAD (`role`: e.g. "env_runner/")."""
        prefix = f"{job_id}/{role}"
        return [r for n, r in self.host.actors.items() if n.startswith(prefix) and r.state != ActorState.DEAD]

    def _cleanup(self, job: JobRecord) -> None:
        """Stop every live actor of an ended job (idempotent)."""
        for rec in sorted(self._live_actors(job.job_id), key=lambda r: r.name):
            self.host.kill_actor(rec.name, f"job {job.stage.value.lower()}")

    # ---------------------------------------------------------------- client API

    def submit(self, req: pb.SubmitJobRequest) -> JobRecord:
        job_id = req.job_id or f"job-{time.strftime('%Y%m%d-%H%M%S')}-{self.host.events.seq % 10000:04d}"
        if not JOB_ID.fullmatch(job_id):
            raise InvalidArgumentError(
                f"job id {job_id[:100]!r} must be 1..80 characters of letters, digits, '_', '.', '-'")
        data, runners, learners = parse_job(req.config)
        old = self.jobs.get(job_id)
        if old is not None and not old.stage.final:
            raise AlreadyExistsError(
                f"job {job_id!r} exists and is {old.stage.value}; stop it first or choose another name")
        if sum(1 for j in self.jobs.values() if not j.stage.final) >= MAX_LIVE_JOBS:
            raise ResourceExhaustedError(f"the cluster runs {MAX_LIVE_JOBS} jobs already")
        output = req.output_dir or str((self.jobs_dir or Path("ftrl_jobs")) / job_id)
        if len(output) > 4096 or "\0" in output:
            raise InvalidArgumentError("output_dir must be a path of at most 4096 characters")
        output = str(Path(output).absolute())
        if not req.resume and has_saved_state(output):
            raise FailedPreconditionError(
                f"{output} already holds the state of an earlier run (checkpoints, {DRIVER_STATE_FILE}); "
                "submit with resume (`ftrl submit --resume`) to continue it, or choose another output directory")
        live_actors = self._live_actors(job_id)
        if live_actors:
            raise AlreadyExistsError(f"job {job_id!r} still has live actors ({live_actors[0].name}, ...)")
        job = JobRecord(job_id=job_id, config=codec.encode(data), output_dir=output,
                        num_env_runners=runners, num_learners=learners, resume=req.resume)
        if old is not None:
            job.seq = old.seq + 1
            self._drop_results.add(job_id)
        self.jobs[job_id] = job
        self._forget_ended()
        self._touch(job)
        self.host.events.emit(pb.EVENT_JOB, actor=job_id, message="PENDING: submitted")
        log.info("job %s submitted (output %s, %d env runners, %d learners%s)", job_id, output,
                 runners, learners, ", resume" if req.resume else "")
        self._create_driver(job)
        return job

    def _create_driver(self, job: JobRecord) -> None:
        data = codec.decode(job.config, codec.SMALL_LIMITS)
        kwargs = {"job": data, "output_dir": job.output_dir, "job_name": job.job_id}
        spec = pb.ActorSpec(name=job.driver, class_path=DRIVER_CLASS, kwargs=codec.encode(kwargs),
                            max_restarts=DRIVER_MAX_RESTARTS, resources=driver_resources(data),
                            owner=f"job.{job.job_id}"[:100], max_concurrency=4)
        rec = self.host.get_or_create_actor(spec)
        self.actor_changed(rec)

    def get(self, job_id: str) -> JobRecord:
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id[:100]!r}; `ftrl status` lists the jobs")
        return job

    def scale(self, req: pb.ScaleJobRequest) -> JobRecord:
        job = self.get(req.job_id)
        check_counts(req.num_env_runners, req.num_learners)
        if job.stage.final:
            raise FailedPreconditionError(f"job {job.job_id!r} has ended ({job.stage.value})")
        if req.num_learners not in (-1, job.num_learners) and (job.num_learners == 0) != (req.num_learners == 0):
            raise FailedPreconditionError(
                f"job {job.job_id!r} has {job.num_learners} learners: a job trains either in its "
                "driver (0 learners) or on a learner group (1 or more), and cannot switch while running")
        if req.num_env_runners not in (-1, job.num_env_runners) and (
                (job.num_env_runners == 0) != (req.num_env_runners == 0)):
            raise FailedPreconditionError(
                f"job {job.job_id!r} has {job.num_env_runners} env runners: a job samples either "
                "in its driver (0 runners) or on env runners (1 or more), and cannot switch while running")
        changed = False
        if req.num_env_runners != -1 and req.num_env_runners != job.num_env_runners:
            job.num_env_runners, changed = req.num_env_runners, True
        if req.num_learners != -1 and req.num_learners != job.num_learners:
            job.num_learners, changed = req.num_learners, True
        if changed:
            log.info("job %s: scale to %d env runners, %d learners", job.job_id, job.num_env_runners,
                     job.num_learners)
            self._touch(job)
        return job

    def stop(self, job_id: str, reason: str = "") -> JobRecord:
        job = self.get(job_id)
        if job.stage.final or job.stop_requested:
            return job
        job.stop_requested = True
        self._touch(job)
        if job.stage == S.PENDING:
            self._set_stage(job, S.STOPPED, reason or "stopped before it started")
        return job

    # ---------------------------------------------------------------- from the job

    def report(self, r: pb.JobReport) -> JobRecord:
        """A driver's report: its rows to the results store; the record's stage, counters
        and shown row only move forward (see the module docstring)."""
        job = self.get(r.job_id)
        if r.incarnation < job.driver_incarnation:
            log.info("job %s: report of driver incarnation %d ignored (current %d)", job.job_id,
                     r.incarnation, job.driver_incarnation)
            return job
        if job.stage not in REPORT_ACCEPTED:
            log.info("job %s: report (%s) ignored in stage %s", job.job_id,
                     pb.JobStage.Name(r.stage), job.stage.value)
            return job
        if len(r.rows) > MAX_ROWS_PER_REPORT:
            raise InvalidArgumentError(f"{len(r.rows)} rows in one report; the limit is {MAX_ROWS_PER_REPORT}")
        changed = False
        if r.incarnation > job.driver_incarnation:
            job.driver_incarnation, changed = r.incarnation, True
        for row in r.rows:
            if len(row.row) > MAX_ROW_BYTES or row.iteration < 0:
                raise InvalidArgumentError(f"a result row of {len(row.row)} bytes or a negative iteration")
            self._results.append((job.job_id, row.iteration, row.row))
            changed = True  # the job's results changed: followers look
            if row.iteration >= job.metrics_iteration:
                job.metrics, job.metrics_iteration = row.row, row.iteration
        # A STARTING driver does not know its counters yet (its checkpoint is not loaded).
        counted = r.stage != pb.JOB_STARTING
        if counted and (r.iteration > job.iteration or r.env_steps_sampled > job.env_steps_sampled):
            job.iteration = max(job.iteration, r.iteration)
            job.env_steps_sampled = max(job.env_steps_sampled, r.env_steps_sampled)
            changed = True
        if r.last_checkpoint and r.last_checkpoint != job.last_checkpoint:
            job.last_checkpoint, changed = r.last_checkpoint[:4096], True
        if changed:
            self._touch(job)
        stage = REPORTABLE.get(r.stage)
        if stage == S.RUNNING:
            self._set_stage(job, S.RUNNING, "")
        elif stage is not None and stage.final:
            self._set_stage(job, stage, r.reason[:4000])
        return job

    def actor_changed(self, rec: ActorRecord) -> None:
        """Follow the driver's actor record: placed -> STARTING, died -> RECOVERING,
        DEAD -> FAILED (with the reason)."""
        job_id, _, role = rec.name.rpartition("/")
        if role != "algorithm":
            return
        job = self.jobs.get(job_id)
        if job is None:
            if rec.adopted and rec.spec.class_path in DRIVER_CLASSES and rec.state != ActorState.DEAD:
                self._rebuild(job_id, rec)
            return
        if job.stage.final:
            return
        if rec.state == ActorState.DEAD:
            reason = rec.death_reason.partition("\n")[0]
            if job.stop_requested and reason.startswith("killed"):
                self._set_stage(job, S.STOPPED, "stopped on request")
            else:
                self._set_stage(job, S.FAILED, f"the driver {rec.name} is DEAD: {reason}; its last "
                                f"checkpoint is kept (`ftrl submit --resume` continues it)")
        elif rec.state == ActorState.RESTARTING and job.stage in (S.STARTING, S.RUNNING):
            self._set_stage(job, S.RECOVERING, f"driver died: {rec.death_reason.partition(chr(10))[0]}")
        elif rec.state in (ActorState.STARTING, ActorState.ALIVE) and job.stage == S.PENDING:
            self._set_stage(job, S.STARTING, f"driver placed on {rec.node_id}")

    def _rebuild(self, job_id: str, rec: ActorRecord) -> None:
        """--recover: a driver a worker still runs brings its job's record back."""
        try:
            kwargs = codec.decode(rec.spec.kwargs, codec.SMALL_LIMITS)
            data, runners, learners = parse_job(codec.encode(kwargs["job"]))
            output = str(kwargs["output_dir"])
        except Exception as e:
            log.warning("adopted driver %s: cannot rebuild its job (%s)", rec.name, e)
            return
        job = JobRecord(job_id=job_id, config=codec.encode(data), output_dir=output,
                        num_env_runners=runners, num_learners=learners, resume=True,
                        stage=S.RUNNING, reason="rebuilt from a worker report (--recover)",
                        driver_incarnation=rec.incarnation)
        self.jobs[job_id] = job
        self._touch(job)
        log.warning("job %s rebuilt from its running driver (output %s)", job_id, output)

    # ---------------------------------------------------------------- periodic

    def tick(self, now: float) -> None:
        """Job-level limits: a RUNNING job with runners wanted and none alive for longer
        than job_unhealthy_timeout_s FAILS, saying which runner failed how. Checked once a
        second (each check scans the actors), not on every controller tick."""
        if now < self._next_check:
            return
        self._next_check = now + HEALTH_CHECK_INTERVAL_S
        limit = self.host.unhealthy_timeout_s()
        for job in list(self.jobs.values()):
            if job.stage != S.RUNNING or job.num_env_runners == 0:
                continue
            prefix = f"{job.job_id}/env_runner/"
            runners = [r for n, r in self.host.actors.items() if n.startswith(prefix)]
            if not runners or any(r.state == ActorState.ALIVE for r in runners):
                job.unhealthy_since = None
                continue
            if job.unhealthy_since is None:
                job.unhealthy_since = now
                continue
            if now - job.unhealthy_since > limit:
                last = max(runners, key=lambda r: r.state_since)
                why = last.death_reason.partition("\n")[0] or last.state.value
                self._set_stage(job, S.FAILED,
                                f"no healthy env runner for {now - job.unhealthy_since:.0f}s "
                                f"(job_unhealthy_timeout_s={limit:g}); last: {last.name}: {why}. "
                                "Fix the cause, then `ftrl submit --resume` continues from the last "
                                "checkpoint")

    def _forget_ended(self) -> None:
        ended = sorted((j for j in self.jobs.values() if j.stage.final), key=lambda j: j.stage_since)
        for job in ended[:max(0, len(ended) - MAX_ENDED_JOBS)]:
            del self.jobs[job.job_id]
            self._dirty.add(job.job_id)
            self._drop_results.add(job.job_id)

    # ---------------------------------------------------------------- views

    def info(self, job: JobRecord, with_config: bool = True, detail: bool = True) -> pb.JobInfo:
        """The job's proto view; `detail=False` (a driver's report reply, once a second per
        job) leaves out the config and the list of its actors (a scan of every actor)."""
        actors = sorted(r.name for r in self._live_actors(job.job_id)) if detail else []
        return pb.JobInfo(
            job_id=job.job_id, stage=job.stage.proto, iteration=job.iteration,
            env_steps_sampled=job.env_steps_sampled, metrics=job.metrics, reason=job.reason,
            output_dir=job.output_dir, config=job.config if with_config and detail else b"",
            num_env_runners=job.num_env_runners, num_learners=job.num_learners,
            stop_requested=job.stop_requested, submitted_at=job.submitted_at,
            stage_since=job.stage_since, last_checkpoint=job.last_checkpoint, seq=job.seq,
            resume=job.resume, actors=actors, driver_incarnation=job.driver_incarnation,
        )
