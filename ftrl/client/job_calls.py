"""The jobs side of the client: submit, watch, scale, stop and read a job's results, and
the driver's progress report."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from ftrl.client.connection import Connection
from ftrl.client.jobs import (
    FINAL_STAGES,
    absolute_path,
    check_job_id,
    job_config,
    job_rows,
    scale_count,
    stage_value,
)
from ftrl.util.backoff import Backoff
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.convert import job_dict
from ftrl.wire.errors import (
    ActorUnavailableError,
    ConfigError,
    FtrlError,
    FtrlTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    error_from_rpc,
)

SUBMIT_TIMEOUT_S = 30.0
#: Longest one GetJob long-poll waits at the coordinator.
LONG_POLL_S = 30.0
#: How long `results()` keeps reopening a broken stream before giving up.
RESULTS_RETRY_S = 120.0


class JobCalls(Connection):
    """Coordinator calls about jobs (part of `AsyncClient`)."""

    async def submit(self, config: Any, *, job_id: str | None = None, output_dir: str | None = None,
                     resume: bool = False, stop: Any = None) -> str:
        """Submit a job; returns its id (the `JOB/` prefix of its actors).

        config: an AlgorithmConfig, a `ftrl.config.JobSpec`, a dict (a job file's
        content) or the path of a TOML job file; `stop` (dict or StopCriteria) goes over
        its [stop] table. It is validated here first: ConfigError (naming the nearest
        valid key) before any call. output_dir: default under the coordinator's state
        dir; a fresh job refuses one holding checkpoints unless `resume`
        (FailedPreconditionError). AlreadyExistsError: a job of that id is still running.
        """
        job = job_config(config, stop)
        request = pb.SubmitJobRequest(
            job_id=check_job_id(job_id) if job_id else "",
            config=codec.check_encodable(job, "job config"),
            output_dir=absolute_path(output_dir) if output_dir else "",
            resume=resume,
        )
        try:
            info = await self._rpc("SubmitJob", request, timeout=max(self.timeout, SUBMIT_TIMEOUT_S))
        except InvalidArgumentError as e:  # the coordinator refused the config
            raise ConfigError(str(e)) from None
        return info.job_id

    async def job_status(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """The job's record: job_id, stage, iteration, env_steps_sampled, metrics (the
        newest row), actors, reason, output_dir, num_env_runners, num_learners,
        last_checkpoint, seq, ... (NotFoundError if there is none). `timeout`: the call's
        (default: the client's)."""
        return job_dict(await self._rpc("GetJob", pb.GetJobRequest(job_id=job_id), timeout=timeout))

    async def jobs(self) -> list[dict[str, Any]]:
        """Every job the coordinator knows, as `job_status` dicts."""
        reply = await self._rpc("ListJobs", pb.ListJobsRequest())
        return [job_dict(j) for j in reply.jobs]

    async def wait_job(self, job_id: str, after_seq: int = -1, timeout: float = 60.0) -> dict[str, Any]:
        """The job's record once its `seq` is past `after_seq`, or as it is after `timeout`."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            wait = max(0.0, min(deadline - time.monotonic(), LONG_POLL_S))
            info = await self._rpc("GetJob", pb.GetJobRequest(job_id=job_id, wait_s=wait, after_seq=after_seq),
                                   timeout=wait + self.timeout)
            if info.seq > after_seq or time.monotonic() >= deadline:
                return job_dict(info)

    async def scale(self, job_id: str, env_runners: int | None = None,
                    learners: int | None = None) -> dict[str, Any]:
        """Ask for `env_runners` runners and/or `learners` learners (None: unchanged);
        returns the record once the coordinator accepted it (the driver resizes at its
        next iteration boundary)."""
        if env_runners is None and learners is None:
            raise InvalidArgumentError("scale needs env_runners or learners")
        request = pb.ScaleJobRequest(job_id=job_id, num_env_runners=scale_count("env_runners", env_runners),
                                     num_learners=scale_count("learners", learners))
        return job_dict(await self._rpc("ScaleJob", request))

    async def stop(self, job_id: str, wait: bool = False, timeout: float = 600.0,
                   reason: str = "") -> dict[str, Any]:
        """Ask the job to stop after its current iteration (with a final checkpoint);
        with `wait`, return once it reached a final stage (FtrlTimeoutError after
        `timeout`). Stopping a job that already ended changes nothing."""
        info = job_dict(await self._rpc("StopJob", pb.StopJobRequest(job_id=job_id, reason=reason)))
        deadline = time.monotonic() + timeout
        while wait and info["stage"] not in FINAL_STAGES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FtrlTimeoutError(f"job {job_id} is still {info['stage']} {timeout:g}s after stop")
            info = await self.wait_job(job_id, info["seq"], remaining)
        return info

    async def results(self, job_id: str, follow: bool = True, after_iteration: int = 0,
                      retry_s: float = RESULTS_RETRY_S) -> AsyncIterator[dict[str, Any]]:
        """The job's metrics rows (dicts) in iteration order: those past `after_iteration`,
        then, with `follow`, new ones until the job ends. A broken stream (coordinator
        restart) is reopened past the last row seen, for up to `retry_s` in a row."""
        last = after_iteration
        backoff = Backoff(base=0.2, cap=5.0)
        outage_since: float | None = None
        while True:
            call = self.stub.JobResults(
                pb.JobResultsRequest(job_id=job_id, after_iteration=last, follow=follow),
                metadata=self._md, timeout=None if follow else max(self.timeout, 60.0))
            try:
                async for result in call:
                    outage_since = None
                    backoff.reset()
                    if result.iteration <= last:
                        continue  # replayed across a reconnect
                    last = result.iteration
                    yield codec.decode(result.row)
                if not follow or (await self.job_status(job_id))["stage"] in FINAL_STAGES:
                    return
                error: FtrlError = ActorUnavailableError(f"the results stream of job {job_id} ended early")
            except grpc.RpcError as e:
                error = error_from_rpc(e, f"coordinator at {self.address}")
            except (ActorUnavailableError, FtrlTimeoutError, NotFoundError) as e:  # from job_status
                error = e
            finally:
                call.cancel()
            # NotFoundError after rows came: a coordinator restarted without its state,
            # rebuilding the job from its driver's report (part of the outage)
            lost = isinstance(error, NotFoundError) and (last > after_iteration or outage_since)
            if not (lost or isinstance(error, ActorUnavailableError | FtrlTimeoutError)):
                raise error
            outage_since = outage_since or time.monotonic()
            if time.monotonic() - outage_since > retry_s:
                raise error
            await asyncio.sleep(backoff.next_delay())

    async def report_job(self, job_id: str, incarnation: int, stage: str, iteration: int,
                         env_steps_sampled: int, rows: list[dict[str, Any]], last_checkpoint: str = "",
                         reason: str = "", timeout: float = 5.0) -> dict[str, Any]:
        """The driver's progress report (stage STARTING, RUNNING or a final one; new
        metrics rows in order). Returns the record, whose num_env_runners,
        num_learners and stop_requested say what the driver should do."""
        report = pb.JobReport(job_id=job_id, incarnation=incarnation, stage=stage_value(stage),
                              iteration=iteration, env_steps_sampled=env_steps_sampled,
                              rows=job_rows(rows), last_checkpoint=last_checkpoint, reason=reason)
        return job_dict(await self._rpc("ReportJob", report, timeout=timeout))

