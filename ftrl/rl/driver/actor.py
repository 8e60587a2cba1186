"""The job's driver as an actor: `"ftrl.rl.driver.actor:AlgorithmDriver"`.

    client.create_actor("ftrl.rl.driver.actor:AlgorithmDriver", name=f"{job}/algorithm",
                        kwargs={"job": job_spec_dict, "output_dir": "/runs/job"},
                        max_restarts=10)

The constructor returns at once; training runs on a thread of the actor. Runners and
learners are created through the actor's own client (`get_runtime_context().client()`)
under the job's name, with `get_if_exists`, so a driver that was killed and restarted
(in place, or on another node when its node was lost) re-attaches to the runners and
learners that stayed up and resumes from the newest state that still exists
(ftrl.rl.driver.state: the per-iteration driver_state.ftrl, the live learners' weights
and optimizer, the coordinator's record of the job): a driver's death costs at most
the iteration in flight, and no row of metrics.jsonl is removed. `status()` reports
progress; `stop()` asks for a stop after the current iteration.
Outside an actor (tests), pass `client=` in-process.

Inside an actor the driver also reports to its job record on the coordinator through
a `JobLink` (ftrl.rl.driver.job_link; never in training's way): STARTING at once, RUNNING
once built, every iteration's metrics row (once it is on disk) with the newest
checkpoint, and the final stage (FINISHED: a stop criterion; STOPPED: on request;
FAILED: the error) before it ends. Each reply may ask for a stop or for other numbers of env runners / learners,
applied at the next boundary. The wanted sizes are not checkpointed: a restarted
driver starts with the job's configured sizes and the coordinator's wanted ones are
applied from its first reply.

`__ftrl_drain__()` (the worker is being pre-empted): stop after the current iteration
with a checkpoint, leave runners and learners up, report no final stage; the driver's
next incarnation (elsewhere) re-attaches and resumes from that checkpoint.

Its methods (called through the actor's handle; max_concurrency 4, so they can block
while training runs):

    status()                         stage, iteration, env steps, return, hyperparams, ...
    wait_status(after_iteration, timeout_s)   the status once an iteration past it is done
    wait(timeout)                    the status once the run ended
    stop()                           stop after the current iteration (final checkpoint)
    scale_learners(num_learners)     resize the learner group at the next step boundary
    checkpoint_now(timeout_s=30)     a checkpoint at the next iteration boundary: its
                                     path, iteration, env steps, return, weights version
    exploit(checkpoint, hyperparams, timeout_s=30)
                                     population-based training's exploit in place: take
                                     another trial's checkpoint with perturbed live
                                     hyperparameters (ftrl.rl.driver.exploit), same runner
                                     and learner processes
    __ftrl_drain__()                 the node is being pre-empted (above)

`checkpoint_now` and `exploit` run on the training thread between two iterations
(`Algorithm.run_at_boundary`). A driver still building waits for its run within the
timeout; no boundary within `timeout_s` raises FtrlTimeoutError and nothing is done
(work that began at the boundary and is still going on at the timeout goes on; its
result shows in the status, "last_exploit"). A run that ended (FINISHED, STOPPED)
answers `checkpoint_now` with its newest checkpoint on disk and "final": True; a failed
or drained one, and any ended run asked to `exploit`, raise FailedPreconditionError.
The hyperparameters an exploit set are kept in the driver state: a driver that restarts
resumes with them (a PBT trial keeps what PBT gave it).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftrl.client.jobs import FINAL_STAGES
from ftrl.config import load_job
from ftrl.rl.driver.boundary import RunEnded
from ftrl.rl.driver.checkpoint import CheckpointManager
from ftrl.rl.driver.job_link import JobLink
from ftrl.rl.driver.metrics import json_safe
from ftrl.rl.driver.run_loop import StopRequest
from ftrl.rl.driver.state import checkpoint_summary
from ftrl.util.run_dir import CHECKPOINT_DIR, has_saved_state
from ftrl.wire.errors import FailedPreconditionError, FtrlError, FtrlTimeoutError

log = logging.getLogger(__name__)

#: How long `__ftrl_drain__` waits for the iteration in progress and its checkpoint.
DRAIN_TIMEOUT_S = 60.0
#: How long the end of a run waits for the coordinator to take its final report.
FINAL_REPORT_TIMEOUT_S = 60.0
#: How long a resuming driver waits for the coordinator's record of its job's progress.
KNOWN_ROW_TIMEOUT_S = 3.0
# What a follower needs to show progress (Progress.format), not the whole result.
_PROGRESS_KEYS = frozenset({
    "iteration", "env_steps_sampled", "episode_return_mean", "num_env_runners",
    "num_healthy_env_runners", "num_env_runner_restarts", "num_sub_env_restarts", "time_s",
    "evaluation", "num_learners", "mesh_epoch", "weights_version",
})


class AlgorithmDriver:
    """Runs one job (config + stop criteria) to its end inside an actor process.

    Args:
        job: the job file as a dict (`algo`, config keys or tables, `[stop]`).
        output_dir: where metrics.jsonl, checkpoints/ and result.json go.
        job_name: actor-name prefix of the job's runners (default: this actor's name
            without its "/algorithm" suffix); also the job's id on the coordinator.
        client: only in-process; inside an actor the runtime's client is used.
        job_client: what the job link reports through (`report_job`); default: the
            runtime's client inside an actor, no reports outside one.
    """

    def __init__(self, job: dict, output_dir: str, job_name: str | None = None, client: Any = None,
                 job_client: Any = None):
        from ftrl.client.context import get_runtime_context

        self.spec = load_job(data=job)  # ConfigError here fails the actor's start
        self.spec.config.validate()
        ctx = get_runtime_context()
        self.incarnation = ctx.incarnation if ctx is not None else 1
        if client is None and ctx is not None:
            client = ctx.client()
        if job_name is None:
            job_name = ctx.name.rsplit("/algorithm", 1)[0] if ctx is not None else "job"
        if job_client is None and ctx is not None:
            job_client = ctx.client()
        self.client = client
        self.job_client = job_client
        self.job_name = job_name
        self.output_dir = Path(output_dir)
        self._stop = StopRequest()
        self._lock = threading.Condition()
        self._status: dict[str, Any] = {"stage": "STARTING", "incarnation": self.incarnation}
        self._done = threading.Event()
        self._algo: Any = None
        self._seen_sizes: dict[str, int] = {}  # wanted sizes already acted on, by group
        self.link: JobLink | None = None
        if job_client is not None:
            self.link = JobLink(job_client, job_name, self.incarnation, on_reply=self._on_job_info).start()
            self.link.report("STARTING")
        self._thread = threading.Thread(target=self._main, name="ftrl-driver", daemon=True)
        self._thread.start()

    def _set(self, **values: Any) -> None:
        with self._lock:
            self._status.update(json_safe(values))
            self._lock.notify_all()

    def _main(self) -> None:
        algo = None
        final: dict[str, Any] = {}
        try:
            # a restarted driver (or one whose job has a state) resumes: never from scratch
            resume = has_saved_state(self.output_dir) or self.incarnation > 1
            algo = self.spec.config.build(
                client=self.client, output_dir=self.output_dir, resume=resume, job_name=self.job_name,
                known_row=self._known_row() if resume else None,
            )
            algo.on_row_durable = self._on_row_durable
            self._algo = algo
            self._set(
                stage="RUNNING",
                iteration=algo.iteration,
                env_steps_sampled=algo.env_steps_sampled,
                restored_from=str(algo.restored_from) if algo.restored_from else None,
                hyperparams=dict(algo.hyperparams),
            )
            if self.link is not None:
                for row in algo.rows_to_report:  # a row its predecessor wrote no report of
                    self.link.report(row=row)
                self.link.report("RUNNING", iteration=algo.iteration, env_steps_sampled=algo.env_steps_sampled,
                                 last_checkpoint=str(algo.latest_checkpoint() or ""))
            summary = algo.run(self.spec.stop, on_result=self._on_result, stop_event=self._stop)
            reason = summary["stop_reason"]
            if reason == "drained":
                final = {"summary": summary}  # no stage: the job goes on elsewhere
            elif reason == "stopped":
                final = {"stage": "STOPPED", "summary": summary, "reason": "stopped on request"}
            elif reason == "learner_wait_timeout":  # too few learners: not a stop criterion
                final = {"stage": "FAILED", "summary": summary, "error": summary.get("error"),
                         "reason": summary.get("error") or reason}
            else:
                final = {"stage": "FINISHED", "summary": summary, "reason": reason}
        except BaseException as e:  # its thread's end: anything is the run's failure
            log.exception("driver of %s failed", self.job_name)
            error = f"{type(e).__name__}: {e}"
            final = {"stage": "FAILED", "error": error, "traceback": traceback.format_exc(), "reason": error}
        finally:
            self._end(algo, final)

    def _end(self, algo: Any, final: dict[str, Any]) -> None:
        """Stop the runners and learners (kept for the next incarnation when drained),
        report the end, then show it in the status."""
        drained = "stage" not in final
        try:
            if algo is not None:
                algo.stop(kill_actors=not drained)
        except Exception:
            log.exception("driver of %s: stopping its runners and learners failed", self.job_name)
        try:
            self._report_end(algo, final)
        finally:
            if drained:
                self._set(draining=True, summary=final.get("summary"))
            else:
                self._set(**final)
            self._done.set()

    def _report_end(self, algo: Any, final: dict[str, Any]) -> None:
        """The job's end to the coordinator (delivered, within a bound); a drained run
        only flushes its rows: the job goes on with the driver's next incarnation."""
        if self.link is None:
            return
        summary = final.get("summary") or {}
        fields: dict[str, Any] = {}
        if algo is not None:
            fields = {"iteration": algo.iteration, "env_steps_sampled": algo.env_steps_sampled}
        if summary.get("checkpoint"):
            fields["last_checkpoint"] = str(summary["checkpoint"])
        if "stage" not in final:
            self.link.report(**fields)
            self.link.close(flush_s=5.0)
        else:
            self.link.finish(final["stage"], str(final.get("reason") or ""), timeout_s=FINAL_REPORT_TIMEOUT_S,
                             **fields)

    def _known_row(self) -> dict[str, Any] | None:
        """The newest metrics row the coordinator holds for this job (None when it is
        unreachable within KNOWN_ROW_TIMEOUT_S, or has none): a resume never goes back past
        it, and a coordinator that is away does not hold the resume up."""
        if self.job_client is None or not hasattr(self.job_client, "job_status"):
            return None
        try:
            row = self.job_client.job_status(self.job_name, timeout=KNOWN_ROW_TIMEOUT_S).get("metrics")
        except Exception as e:  # unreachable, no such job (a driver started by hand)
            log.info("job %s: no record of its progress from the coordinator (%s)", self.job_name, e)
            return None
        return row if isinstance(row, dict) and isinstance(row.get("iteration"), int) else None

    def _on_row_durable(self, row: dict[str, Any]) -> None:
        """A row is on disk (the state writer's thread): report it to the coordinator."""
        algo = self._algo
        if self.link is None or algo is None:
            return
        self.link.report("RUNNING", iteration=row["iteration"], env_steps_sampled=row["env_steps_sampled"],
                         row=row, last_checkpoint=str(algo.latest_checkpoint() or ""))

    def _on_result(self, result: dict[str, Any]) -> None:
        self._set(
            result={k: v for k, v in result.items() if k in _PROGRESS_KEYS},
            iteration=result["iteration"],
            env_steps_sampled=result["env_steps_sampled"],
            episode_return_mean=result.get("episode_return_mean"),
            num_healthy_env_runners=result.get("num_healthy_env_runners"),
            num_env_runner_restarts=result.get("num_env_runner_restarts"),
            time_s=result.get("time_s"),
        )

    def _on_job_info(self, info: dict[str, Any]) -> None:
        """A reply of the coordinator (on the link's thread): a stop request stops the run
        after the current iteration; a wanted size that changed resizes its group once."""
        algo = self._algo
        if info.get("stop_requested"):
            if algo is None and not self._stop.is_set() and self.link is not None:
                # still building (waiting for its runners or learners to be placed): nothing
                # was trained since its last state, so it ends now; the coordinator stops
                # its actors, this one included
                self.link.report("STOPPED", reason="stopped on request while starting")
            self._stop.request("stopped")
        if algo is None:  # not built yet: the next reply (within a second) is acted on
            return
        for key, current, resize in (
            ("num_env_runners", _target(algo.env_runner_group), algo.scale_env_runners),
            ("num_learners", _target(algo.learner_group), algo.scale_learners),
        ):
            wanted = info.get(key)
            if wanted is None or self._seen_sizes.get(key) == int(wanted):
                continue
            self._seen_sizes[key] = int(wanted)
            if int(wanted) == current:
                continue
            log.info("job %s: %s %d -> %d (asked by the coordinator)", self.job_name, key, current, wanted)
            try:
                resize(int(wanted))
            except FtrlError as e:
                log.error("job %s: cannot set %s to %d: %s", self.job_name, key, wanted, e)

    def status(self) -> dict[str, Any]:
        """{"stage": STARTING|RUNNING|FINISHED|STOPPED|FAILED, "iteration",
        "env_steps_sampled", "episode_return_mean", "incarnation", "restored_from", ...}."""
        with self._lock:
            return dict(self._status)

    def wait_status(self, after_iteration: int, timeout_s: float = 10.0) -> dict[str, Any]:
        """Block until an iteration past `after_iteration` is done or the run ended
        (or `timeout_s` passed, at most 60 s); return the status. For followers such
        as `ftrl train`, instead of polling. Needs max_concurrency >= 2."""
        deadline = min(max(0.0, timeout_s), 60.0)
        with self._lock:
            self._lock.wait_for(
                lambda: (self._status.get("iteration") or 0) > after_iteration
                or self._status.get("stage") in FINAL_STAGES,
                timeout=deadline,
            )
            return dict(self._status)

    def scale_learners(self, num_learners: int) -> dict[str, Any]:
        """Grow or shrink the job's learner group at the next step boundary."""
        algo = self._algo
        if algo is None:
            raise RuntimeError("the job is not running yet")
        algo.scale_learners(int(num_learners))
        return self.status()

    # ------------------------------------------------------------------ population-based training

    def checkpoint_now(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Write a checkpoint at the next iteration boundary (or take the one this iteration
        wrote) and return {"path" (absolute), "iteration", "env_steps_sampled", "time_s",
        "episode_return_mean", "saved_at" (time.time()), "weights_version"}. A run that
        ended (FINISHED, STOPPED): its newest checkpoint on disk, with "final": True.
        FtrlTimeoutError when no boundary came within `timeout_s`; FailedPreconditionError
        for a run that failed, is being drained, or ended without a checkpoint."""
        deadline = time.monotonic() + max(0.0, float(timeout_s))
        try:
            return self._at_boundary("checkpoint_now", lambda algo: algo.checkpoint_now(), deadline)
        except RunEnded:
            return self._final_checkpoint(deadline)

    def exploit(self, checkpoint: str, hyperparams: dict[str, Any] | None = None,
                timeout_s: float = 30.0) -> dict[str, Any]:
        """At the next iteration boundary, take `checkpoint` (another trial's, absolute path)
        with `hyperparams` (live keys, ftrl.config.live), keeping this job's runners,
        learners and counters (ftrl.rl.driver.exploit). Returns {"applied_at",
        "iteration", "weights_version", "donor_iteration", "hyperparams" (applied),
        ...}. A bad checkpoint (InvalidArgumentError), one of another
        algorithm/env/model (ConfigError), a key that is not live or a bad value
        (ConfigError) change nothing. FtrlTimeoutError when no boundary came within
        `timeout_s`; FailedPreconditionError when the run ended."""
        deadline = time.monotonic() + max(0.0, float(timeout_s))
        try:
            info = self._at_boundary("exploit", lambda algo: algo.exploit(checkpoint, hyperparams or {}), deadline)
        except RunEnded as e:
            raise FailedPreconditionError(f"job {self.job_name}: nothing to exploit into: {e}") from None
        return info

    def _at_boundary(self, what: str, fn: Callable[[Any], Any], deadline: float) -> Any:
        """`fn(algo)` on the training thread at its next iteration boundary, waited for until
        `deadline` (monotonic); a driver still building is waited for within it too."""
        with self._lock:
            self._lock.wait_for(lambda: self._algo is not None or self._ended(),
                                timeout=max(0.0, deadline - time.monotonic()))
            algo, stage, ended = self._algo, self._status.get("stage"), self._ended()
        if algo is None:
            if ended:
                raise RunEnded(f"the run of {self.job_name} ended ({stage}) before it was built")
            raise FtrlTimeoutError(f"{what}: job {self.job_name} is still starting (stage {stage}); nothing was "
                                   "done, call again")
        future = algo.run_at_boundary(fn)
        try:
            result = future.result(max(0.0, deadline - time.monotonic()))
        except cf.TimeoutError:
            if future.cancel():
                raise FtrlTimeoutError(
                    f"{what}: job {self.job_name} reached no iteration boundary in time (it is in iteration "
                    f"{algo.iteration + 1}); nothing was done") from None
            future.add_done_callback(lambda f: self._note_late(what, f))
            raise FtrlTimeoutError(
                f"{what}: job {self.job_name} began it at its iteration boundary and had not finished it at the "
                f"timeout; it goes on, its result shows in status()") from None
        if what == "exploit":
            self._set(hyperparams=dict(algo.hyperparams), last_exploit=result)
        return result

    def _ended(self) -> bool:
        """Whether the run ended or is being drained (the status lock held)."""
        return self._done.is_set() or self._status.get("stage") in FINAL_STAGES or bool(self._status.get("draining"))

    def _note_late(self, what: str, future: cf.Future) -> None:
        """Work that was still running at its caller's timeout finished: show its result."""
        if future.exception() is not None:
            log.error("job %s: %s failed after its caller's timeout: %s", self.job_name, what, future.exception())
        elif what == "exploit" and self._algo is not None:
            self._set(hyperparams=dict(self._algo.hyperparams), last_exploit=future.result())

    def _final_checkpoint(self, deadline: float) -> dict[str, Any]:
        """The newest checkpoint on disk of a run that ended (waited for until `deadline`:
        the end writes its final checkpoint first)."""
        self._done.wait(max(0.0, deadline - time.monotonic()))
        status = self.status()
        stage = status.get("stage")
        if not self._done.is_set():
            raise FtrlTimeoutError(f"checkpoint_now: job {self.job_name} is ending; its final checkpoint was not "
                                   "written in time")
        if status.get("draining"):
            raise FailedPreconditionError(f"job {self.job_name}'s driver is moving to another node (drained); "
                                          "call again once it runs there")
        if stage not in ("FINISHED", "STOPPED"):
            raise FailedPreconditionError(f"job {self.job_name} {stage}: {status.get('error') or 'no checkpoint'}")
        found = CheckpointManager(self.output_dir / CHECKPOINT_DIR).load_latest()
        if found is None:
            raise FailedPreconditionError(f"job {self.job_name} ended ({stage}) without a checkpoint under "
                                          f"{self.output_dir / CHECKPOINT_DIR}")
        return {**checkpoint_summary(*found), "final": True}

    def stop(self) -> dict[str, Any]:
        """Ask for a stop after the current iteration (with a final checkpoint)."""
        self._stop.request("stopped")
        return self.status()

    def __ftrl_drain__(self) -> dict[str, Any]:
        """The node is being pre-empted: stop after the current iteration with a
        checkpoint (waiting up to DRAIN_TIMEOUT_S), keep the runners and learners, and
        report no final stage: this actor restarts elsewhere and resumes from it."""
        log.warning("driver of %s draining: stopping after this iteration with a checkpoint", self.job_name)
        self._stop.request("drained")
        if not self._done.wait(DRAIN_TIMEOUT_S):
            log.error("driver of %s: the iteration did not end within %gs of the drain", self.job_name,
                      DRAIN_TIMEOUT_S)
        return self.status()

    def wait(self, timeout: float = 60.0) -> dict[str, Any]:
        """Block until the run ends (or `timeout`); return the status."""
        self._done.wait(timeout)
        return self.status()


def _target(group: Any) -> int:
    """The size a runner or learner group is asked to have (0: there is no group)."""
    return int(group.target) if group is not None else 0
