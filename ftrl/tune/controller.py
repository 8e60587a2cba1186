"""The experiment's scheduler as an actor: `"ftrl.tune.controller:TuneController"`,
named `NAME/tuner`, created by `ftrl.Tuner.fit()` (or `ftrl tune`) and restarted in
place by the runtime when it dies: everything it decides is in `experiment.json`
before it acts on it (ftrl.tune.persistence), so an incarnation carries on where the
last one stopped (ftrl.tune.adoption says what it makes of each trial when it starts).

One loop, every POLL_S seconds (three coordinator calls: jobs, actors, nodes):

1. follow every RUNNING trial through its job record: the newest metrics row (the
   score PBT ranks by; ftrl.tune.trial_jobs), the end of the job (TERMINATED when a stop
   criterion ended it; a FAILED job is retried from its newest checkpoint up to
   max_failures, then ERROR);
2. a trial whose runner or learner waits for a node that is gone (its node was lost
   or pre-empted and no other node has room; ftrl.tune.preemption) is pre-empted: its
   job is stopped, and the trial goes back to the FRONT of the queue, to resume from its
   newest checkpoint when there is room again (not counted as a failure); the other
   trials never pause;
3. PBT: a trial at a perturbation point in the bottom quantile clones a top-quantile
   donor IN PLACE (ftrl.tune.exploit: the donor checkpoints now; the target's driver
   loads that checkpoint and the explored hyperparameters at its next iteration
   boundary, its runners and learners stay up). The calls run beside the loop, moved
   on at every pass and woken by their answers, so a slow donor never delays what the
   loop watches. While trials wait for room, a trial at a perturbation point (its
   exploit done) yields its room to the waiting trial furthest behind it and shows
   PAUSED until its turn (ftrl.tune.turns: a time-shared population);
4. waiting trials start while the cluster has room (CPUs, GPUs and custom resources of
   ALIVE nodes, minus what other jobs use) and fewer than max_concurrent_trials run
   (ftrl.tune.placement; PBT: the one furthest behind in time_attr first).

The experiment ends FINISHED when every trial is TERMINATED or ERROR; `stop()` stops
every running trial with a checkpoint (PAUSED, "experiment stopped": `Tuner.restore` /
`ftrl tune --resume` continues them) and ends it STOPPED. Imports no torch.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from enum import StrEnum
from pathlib import Path
from typing import Any

from ftrl.coordinator.jobs import JobStage
from ftrl.tune import schedulers as sched
from ftrl.tune import trial_jobs
from ftrl.tune.adoption import JOB_ENDED, Adoption, adoption
from ftrl.tune.experiment import (
    PAUSED_STOPPED,
    PAUSED_TO_YIELD,
    TUNER_CLASS,
    ExperimentStatus,
    Trial,
    TrialStatus,
    append_lineage,
    pin_checkpoint,
    read_lineage,
    row_key,
    row_value,
)
from ftrl.tune.exploit import Exploits, driver_of
from ftrl.tune.persistence import ExperimentStore
from ftrl.tune.placement import free_resources, owner_of, start_order, to_start
from ftrl.tune.preemption import LostNodeWatch, why_it_cannot_train
from ftrl.tune.turns import yields
from ftrl.util.run_dir import has_saved_state
from ftrl.wire.errors import AlreadyExistsError, ConfigError, FtrlError

log = logging.getLogger(__name__)

__all__ = ["POLL_S", "TUNER_CLASS", "TuneController"]

POLL_S = 0.25
#: How long stopping the experiment waits for each trial's final checkpoint.
PAUSE_TIMEOUT_S = 120.0


class StopCause(StrEnum):
    """Why the tuner stopped a trial's job (what the trial becomes when the job ends)."""

    CRITERION = "stop"  # a stop criterion was reached: TERMINATED
    PAUSE = "pause"  # the experiment stops: PAUSED
    PREEMPT = "preempt"  # its node was lost: back to the queue (already PENDING)
    YIELD = "yield"  # time-sharing: it yielded its turn (already PAUSED)


class Followed(StrEnum):
    """What following a RUNNING trial found."""

    NOTHING = "nothing"
    RESULT = "result"  # a new metrics row
    ENDED = "ended"  # its job ended, or the trial was pre-empted


class TunerStop(StrEnum):
    """Why the tuner's loop was stopped."""

    STOPPED = "stopped"  # `stop()`: the trials pause, the experiment is STOPPED
    DRAINED = "drained"  # its node is pre-empted: the trials go on; the next incarnation adopts them


class TuneController:
    """Runs one experiment (its directory holds experiment.json) to its end on the cluster.

    Args:
        experiment_dir: the experiment's directory (made by `Tuner.fit`); shared by
            every node that may run this actor.
        client: only in-process (tests); inside an actor the runtime's client is used.
    """

    def __init__(self, experiment_dir: str, client: Any = None):
        from ftrl.client.context import get_runtime_context

        ctx = get_runtime_context()
        if client is None and ctx is not None:
            client = ctx.client()
        if client is None:
            raise ConfigError("TuneController needs a client (it runs as an actor on a cluster)")
        self.client = client
        self.incarnation = ctx.incarnation if ctx is not None else 1
        self.store = ExperimentStore(experiment_dir)
        state = self.store.state
        self.name: str = state["name"]
        spec = state["spec"]
        self.base_job: dict[str, Any] = spec["base_job"]
        self.stop_dict = {row_key(k): v for k, v in (spec.get("stop") or {}).items()}
        self.max_failures = int(spec.get("max_failures", 0))
        self.max_concurrent = spec.get("max_concurrent_trials")
        self.metric: str = state["metric"]
        self.mode: str = state["mode"]
        self.trials: dict[str, Trial] = {tid: Trial.from_dict(t) for tid, t in state["trials"].items()}
        saved = state.get("counters", {})  # PBT's own counts live in the PBT state
        self.counters: dict[str, int] = {k: int(saved.get(k, 0))
                                         for k in ("num_preemptions", "num_trial_failures", "num_pauses")}
        self._wake = threading.Event()  # set by stop() and by every answer of an exploit call
        self.exploits = self._population_exploits(state, set(spec.get("live_keys") or []))
        self.lost_nodes = LostNodeWatch()
        self._short_of: dict[str, set[str]] = {}  # trial id -> its actors stranded now (it trains on)
        # running trials at a perturbation point: they may yield their turn (saved: a tuner
        # restarted between a member's point and its turn would otherwise wait a whole interval)
        self._at_point: set[str] = set(state.get("at_point") or [])
        self._stopping: dict[str, StopCause] = {}  # trial id -> why the tuner stopped its job
        self._stop = threading.Event()
        self._stop_cause: TunerStop | None = None
        self._thread = threading.Thread(target=self._main, name="ftrl-tuner", daemon=True)
        self._thread.start()

    def _population_exploits(self, state: dict[str, Any], live_keys: set[str]) -> Exploits | None:
        """PBT's population and its exploits (None with FIFO)."""
        scheduler = sched.scheduler_from_dict(state["scheduler"])
        if not isinstance(scheduler, sched.PopulationBasedTraining):
            return None
        saved = state.get("pbt")
        population = sched.PBTState.from_dict(saved) if saved else sched.PBTState.for_scheduler(scheduler)
        for trial in self.trials.values():
            if trial.trial_id not in population.members:
                population.members[trial.trial_id] = sched.Member(trial.trial_id, alive=False,
                                                                  config=dict(trial.config))
        peers = _ClusterPeers(self.client, self.store.expdir, self._wake, self._save)
        return Exploits(scheduler, population, self.trials, live_keys, peers,
                        pending=state.get("pending_exploits"), skips=state.get("skips"))

    def _save(self) -> None:
        """experiment.json, atomically: the whole state, before any decision is acted on."""
        sections: dict[str, Any] = {"trials": {tid: t.to_dict() for tid, t in self.trials.items()},
                                    "counters": self.all_counters(), "tuner_incarnation": self.incarnation}
        if self.exploits is not None:
            sections.update(pbt=self.exploits.population.to_dict(), pending_exploits=dict(self.exploits.pending),
                            skips=list(self.exploits.skips), at_point=sorted(self._at_point))
        self.store.save(**sections)

    # ------------------------------------------------------------------ the loop

    def _main(self) -> None:
        failed = False
        adopted = False
        state = self.store.state
        try:
            state["status"] = ExperimentStatus.RUNNING
            state.setdefault("started_at", time.time())
            while not self._stop.is_set():
                try:
                    if not adopted:
                        self._adopt()
                        adopted = True
                        self._save()
                    changed = self._step()
                except (FtrlError, OSError) as e:  # the coordinator away: the next pass retries
                    log.warning("tuner of %s: a pass failed (%s); retrying", self.name, e)
                    self._stop.wait(min(5.0, 4 * POLL_S))
                    continue
                if all(t.status.ended for t in self.trials.values()):
                    state["status"] = ExperimentStatus.FINISHED
                    break
                if changed:
                    self._save()
                self._wake.wait(POLL_S)
                self._wake.clear()
            if self._stop_cause == TunerStop.STOPPED:
                self._pause_all()
                state["status"] = ExperimentStatus.STOPPED
            elif self._stop_cause == TunerStop.DRAINED:
                log.warning("tuner of %s drained: the next incarnation goes on", self.name)
        except BaseException as e:  # a bug: record it; the process exits and is restarted in place
            failed = True
            log.exception("tuner of %s failed", self.name)
            state["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"[:8000]
        finally:
            try:
                self._save()
            finally:
                self.store.close()
        if failed:
            logging.shutdown()
            os._exit(70)  # the worker restarts this actor from experiment.json (max_restarts)

    def _step(self) -> bool:
        """One pass: follow, pre-empt, perturb, place. Whether anything changed."""
        jobs = {j["job_id"]: j for j in self.client.jobs() if j["job_id"] in self.trials}
        all_actors = self.client.actors()
        nodes = {n["node_id"]: n for n in self.client.nodes()}
        by_trial: dict[str, list[dict[str, Any]]] = {}
        for a in all_actors:
            if owner_of(a["name"]) in self.trials:
                by_trial.setdefault(owner_of(a["name"]), []).append(a)
        changed = False
        fresh: list[str] = []
        for trial in list(self.trials.values()):
            if trial.status != TrialStatus.RUNNING:
                continue
            followed = self._follow(trial, jobs.get(trial.trial_id), by_trial.get(trial.trial_id, []), nodes)
            changed |= followed != Followed.NOTHING
            if followed == Followed.RESULT:
                fresh.append(trial.trial_id)
        if self.exploits is not None:
            if fresh:
                changed |= self.exploits.perturb(fresh)
                self._note_perturbation_points()
            changed |= self.exploits.advance()
            changed |= self._settle_paused(jobs)
            changed |= self._take_turns(nodes, all_actors)
        changed |= self._place(nodes, all_actors, jobs)
        return changed

    # ------------------------------------------------------------------ following trials

    def _follow(self, trial: Trial, job: dict[str, Any] | None, actors: list[dict[str, Any]],
                nodes: dict[str, dict[str, Any]]) -> Followed:
        """Update a RUNNING trial from its job record and its actors."""
        tid = trial.trial_id
        if job is None:  # the coordinator forgot the job (restarted without its state)
            self._requeue(trial, "its job is unknown to the coordinator", preempted=True)
            return Followed.ENDED
        followed = Followed.NOTHING
        row = job.get("metrics") or {}
        if isinstance(row, dict) and row.get("iteration", 0) > trial.last_result.get("iteration", 0):
            self._take_row(trial, row)
            followed = Followed.RESULT
            reached = trial_jobs.stop_reached(row, self.stop_dict)
            if reached and tid not in self._stopping and job["stage"] not in JOB_ENDED:
                log.info("trial %s reached %s", tid, reached)
                self._stopping[tid] = StopCause.CRITERION
                self._call(lambda: self.client.stop(tid, reason=f"tune stop: {reached}"))
        driver = next((a for a in actors if a["name"] == driver_of(tid)), None)
        if driver is not None and driver.get("node_id"):
            trial.node = driver["node_id"]
        stage = job["stage"]
        if stage == JobStage.FINISHED or (
                stage == JobStage.STOPPED and self._stopping.get(tid) in (StopCause.CRITERION, None)):
            self._stopping.pop(tid, None)
            trial.status = TrialStatus.TERMINATED
            trial.error = "" if stage == JobStage.FINISHED else (job.get("reason") or "stopped")
            self._member_dead(tid)
            log.info("trial %s TERMINATED (%s)", tid, job.get("reason", ""))
            return Followed.ENDED
        if stage == JobStage.STOPPED:  # paused or pre-empted by this tuner: it waits in the queue
            return followed
        if stage == JobStage.FAILED:
            self._failed(trial, (job.get("reason") or "failed")[:2000])
            return Followed.ENDED
        stranded = set(self.lost_nodes.stranded(actors, nodes))
        why = why_it_cannot_train(actors, stranded, self._min_learners(trial)) if stranded else None
        if why is not None:
            self._preempt(trial, why)
            return Followed.ENDED
        if stranded != self._short_of.get(tid, set()):  # elastic: it trains on with the rest
            if stranded:
                log.warning("trial %s trains on without %s (waiting for a lost node)", tid, ", ".join(sorted(stranded)))
            self._short_of[tid] = stranded
        return followed

    def _min_learners(self, trial: Trial) -> int:
        return int({**self.base_job, **trial.config}.get("min_learners") or 1)

    def _take_row(self, trial: Trial, row: dict[str, Any]) -> None:
        trial.last_result = trial_jobs.kept_result(row, self.metric)
        value = trial_jobs.metric_value(row, self.metric)
        if trial_jobs.improves(value, trial.best_metric, self.mode):
            trial.best_metric = value
        if self.exploits is not None:
            time_attr = self.exploits.pbt.time_attr
            self.exploits.population.report(trial.trial_id, value, float(row_value(row, time_attr) or 0))

    def _failed(self, trial: Trial, reason: str) -> None:
        """Its job FAILED: retried from its newest checkpoint up to max_failures, then ERROR."""
        trial.num_failures += 1
        self.counters["num_trial_failures"] += 1
        if trial.num_failures > self.max_failures:
            trial.status, trial.error = TrialStatus.ERROR, reason
            self._member_dead(trial.trial_id)
            log.error("trial %s ERROR after %d failures: %s", trial.trial_id, trial.num_failures, reason)
        else:
            self._requeue(trial, f"failed ({reason})", preempted=False)

    def _preempt(self, trial: Trial, why: str) -> None:
        """It cannot train (`why`: its node is gone and no node has room): stop the trial's
        job; back to the front of the queue, to resume from its newest checkpoint (not a
        failure)."""
        tid = trial.trial_id
        log.warning("trial %s pre-empted: %s", tid, why)
        reason = "pre-empted: its node was lost"
        self._stopping[tid] = StopCause.PREEMPT
        self._call(lambda: self.client.stop(tid, reason=reason))
        self._call(lambda: self.client.kill_actor(driver_of(tid), reason))
        self._requeue(trial, "pre-empted", preempted=True)

    def _requeue(self, trial: Trial, why: str, preempted: bool) -> None:
        trial.status = TrialStatus.PENDING
        trial.queued_at = time.time()
        if preempted:
            trial.num_preemptions += 1
            self.counters["num_preemptions"] += 1
        self._not_running(trial.trial_id)
        log.warning("trial %s back to the front of the queue: %s", trial.trial_id, why)

    def _not_running(self, tid: str) -> None:
        """The trial's job is gone (requeued, paused): what was watched of its run goes (the
        nodes it lost, the resources it was short of); PBT ranks it no more and its saved
        exploit decision goes."""
        self.lost_nodes.forget(tid)
        self._short_of.pop(tid, None)
        self._member_dead(tid)

    def _member_dead(self, tid: str) -> None:
        """The trial no longer runs: PBT ranks it no more, its saved exploit decision goes."""
        if self.exploits is not None:
            self.exploits.population.members[tid].alive = False
            self.exploits.forget(tid)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """A coordinator call whose failure is logged, not raised (the next pass retries)."""
        try:
            return fn()
        except (FtrlError, OSError) as e:
            log.warning("tuner of %s: %s", self.name, e)
            return None

    # ------------------------------------------------------------------ time-sharing (PBT)

    def _times(self) -> dict[str, float] | None:
        """Each trial's time_attr (the rotation order of a time-shared PBT population);
        None with FIFO (its queue order stays)."""
        if self.exploits is None:
            return None
        return {tid: m.time for tid, m in self.exploits.population.members.items()}

    def _note_perturbation_points(self) -> None:
        """The running trials PBT just decided for: at a perturbation point, they may yield."""
        assert self.exploits is not None
        for tid, member in self.exploits.population.members.items():
            running = self.trials[tid].status == TrialStatus.RUNNING
            if running and member.num_perturbations and member.last_perturbation_time == member.time:
                self._at_point.add(tid)

    def _take_turns(self, nodes: dict[str, dict[str, Any]], all_actors: list[dict[str, Any]]) -> bool:
        """Time-sharing (ftrl.tune.turns): while trials wait for room, running trials at a
        perturbation point (their exploit done) yield their room to those behind them."""
        assert self.exploits is not None
        self._at_point = {t for t in self._at_point if self.trials[t].status == TrialStatus.RUNNING}
        waiting = start_order(self.trials.values(), self._times())
        if not waiting:
            self._at_point.clear()  # nobody waits: they run on to their next point
            return False
        ready = [self.trials[t] for t in self._at_point if t not in self.exploits.in_flight]
        if not ready:
            return False
        self._at_point -= {t.trial_id for t in ready}  # each point is looked at once
        running = [t for t in self.trials.values() if t.status == TrialStatus.RUNNING]
        free = free_resources(nodes, all_actors, running)
        pairs = yields(ready, waiting, self._times() or {}, free)
        for trial, behind in pairs:
            self._yield(trial, behind)
        return bool(pairs)

    def _yield(self, trial: Trial, to: Trial) -> None:
        """Stop `trial`'s job with a checkpoint; PAUSED, it waits for its turn (a donor
        still, by its newest checkpoint; never a target)."""
        assert self.exploits is not None
        tid = trial.trial_id
        members = self.exploits.population.members
        log.info("trial %s yields its turn at %s=%g to %s (at %g)", tid, self.exploits.pbt.time_attr,
                 members[tid].time, to.trial_id, members[to.trial_id].time)
        self._stopping[tid] = StopCause.YIELD
        self._call(lambda: self.client.stop(tid, reason=f"paused: yields its turn to {to.trial_id}"))
        trial.status, trial.paused_because = TrialStatus.PAUSED, PAUSED_TO_YIELD
        trial.num_pauses += 1
        self.counters["num_pauses"] += 1
        trial.queued_at = time.time()
        self._not_running(tid)
        members[tid].paused = True

    def _settle_paused(self, jobs: dict[str, dict[str, Any]]) -> bool:
        """A trial that yielded its turn, once its job ended: its last row and final
        checkpoint (what it donates while it waits)."""
        assert self.exploits is not None
        changed = False
        for tid, cause in list(self._stopping.items()):
            job = jobs.get(tid)
            trial = self.trials[tid]
            if cause != StopCause.YIELD or trial.status != TrialStatus.PAUSED:
                continue
            if job is not None and job["stage"] not in JOB_ENDED:
                continue
            del self._stopping[tid]
            changed = True
            if job is None:
                continue
            row = job.get("metrics") or {}
            if isinstance(row, dict) and row.get("iteration", 0) > trial.last_result.get("iteration", 0):
                self._take_row(trial, row)
                self._member_dead(tid)
                self.exploits.population.members[tid].paused = True
            if job.get("last_checkpoint"):
                member = self.exploits.population.members[tid]
                trial.last_checkpoint = {"path": str(job["last_checkpoint"]), "iteration": job.get("iteration"),
                                         "time": member.time, "saved_at": time.time()}
        return changed

    # ------------------------------------------------------------------ placing trials

    def _place(self, nodes: dict[str, dict[str, Any]], all_actors: list[dict[str, Any]],
               jobs: dict[str, dict[str, Any]]) -> bool:
        """Start PENDING trials (those that ran before first) while they fit."""
        queue = start_order(self.trials.values(), self._times())
        if not queue:
            return False
        running = [t for t in self.trials.values() if t.status == TrialStatus.RUNNING]
        free = free_resources(nodes, all_actors, running)
        changed = False
        for trial in to_start(queue, free, len(running), self.max_concurrent):
            if not self._start(trial, jobs.get(trial.trial_id)):
                break
            changed = True
        return changed

    def _start(self, trial: Trial, job: dict[str, Any] | None) -> bool:
        """Submit the trial's job (resuming from its folder when it holds a state); a job
        of the trial that still runs is followed instead, or waited for while it stops."""
        tid = trial.trial_id
        resume = has_saved_state(trial.output_dir)
        if job is not None and job["stage"] not in JOB_ENDED:
            if job.get("stop_requested") or tid in self._stopping:
                # its last run (pre-empted, yielded, paused) is still stopping (`job` may be
                # from before this pass asked it to stop: never follow a job being stopped)
                return False
            log.info("trial %s: its job is running; following it", tid)
        else:
            job_dict = trial_jobs.job_dict(self.base_job, trial.config, self.stop_dict, self.mode)
            try:
                self.client.submit(job_dict, job_id=tid, output_dir=trial.output_dir, resume=resume)
            except AlreadyExistsError:
                return False  # the last run's actors are still being stopped
            except ConfigError as e:
                trial.status, trial.error = TrialStatus.ERROR, f"config error: {e}"
                return True
            except (FtrlError, OSError) as e:
                log.warning("trial %s could not be submitted yet: %s", tid, e)
                return False
            log.info("trial %s started%s with %s", tid, " (resuming)" if resume else "", trial.config)
        self._stopping.pop(tid, None)
        trial.status, trial.paused_because = TrialStatus.RUNNING, ""
        trial.started_at = trial.started_at or time.time()
        if self.exploits is not None:
            member = self.exploits.population.members[tid]
            member.alive, member.paused = True, False
        return True

    # ------------------------------------------------------------------ start and end

    def _adopt(self) -> None:
        """Start (or restart) of the tuner: RUNNING trials whose jobs still run are
        followed; the others, and PAUSED ones, go to the front of the queue; a pending
        exploit whose target still runs is made again."""
        jobs = {j["job_id"]: j for j in self.client.jobs()}
        for trial in self.trials.values():
            action = adoption(trial.status, jobs.get(trial.trial_id), trial.paused_because)
            if action == Adoption.TERMINATED:
                trial.status = TrialStatus.TERMINATED
            elif action == Adoption.REQUEUE:
                self._requeue(trial, "its job is not running after a restart", preempted=False)
            elif action == Adoption.FOLLOW:
                trial.status, trial.paused_because = TrialStatus.RUNNING, ""  # left running by an earlier incarnation
            elif action == Adoption.RESUME:
                trial.status, trial.paused_because = TrialStatus.PENDING, ""
            elif trial.status == TrialStatus.PAUSED and trial.paused_because == PAUSED_TO_YIELD:
                self._stopping[trial.trial_id] = StopCause.YIELD  # its last row and checkpoint are taken
                if self.exploits is not None:
                    self.exploits.population.members[trial.trial_id].paused = True
        if self.exploits is not None:
            self.exploits.reissue(read_lineage(self.store.expdir))

    def _pause_all(self) -> None:
        """Stop every running trial with a final checkpoint: PAUSED (a resume goes on)."""
        running = [t for t in self.trials.values() if t.status == TrialStatus.RUNNING]
        for trial in running:
            self._stopping[trial.trial_id] = StopCause.PAUSE
            self._call(lambda tid=trial.trial_id: self.client.stop(tid, reason="experiment stopped"))
        for trial in running:
            info = self._call(lambda tid=trial.trial_id: self.client.stop(tid, wait=True, timeout=PAUSE_TIMEOUT_S))
            if info is not None and info.get("stage") == JobStage.FINISHED:
                trial.status = TrialStatus.TERMINATED
            else:
                trial.status, trial.paused_because = TrialStatus.PAUSED, PAUSED_STOPPED
            if info is not None and isinstance(info.get("metrics"), dict) and info["metrics"].get("iteration"):
                self._take_row(trial, info["metrics"])

    # ------------------------------------------------------------------ actor API

    def status(self) -> dict[str, Any]:
        """The experiment: status, counters, trials (id, status, config, last result), seq."""
        state = self.store.state
        return {"name": self.name, "status": state.get("status"), "seq": self.store.seq,
                "counters": self.all_counters(), "error": state.get("error", ""),
                "trials": {tid: {"status": t.status, "config": t.config, "last_result": t.last_result,
                                 "best_metric": t.best_metric, "num_exploits": t.num_exploits,
                                 "num_failures": t.num_failures, "num_preemptions": t.num_preemptions,
                                 "num_pauses": t.num_pauses, "paused_because": t.paused_because,
                                 "error": t.error, "node": t.node}
                           for tid, t in self.trials.items()},
                "done": self.store.closed}

    def all_counters(self) -> dict[str, int]:
        """Pre-emptions, trial failures and pauses, and PBT's perturbations, exploits and skips."""
        out = dict(self.counters)
        pbt = self.exploits.population if self.exploits is not None else None
        out.update(num_perturbations=pbt.num_perturbations if pbt else 0, num_exploits=pbt.num_exploits if pbt else 0,
                   num_donor_skips=pbt.num_donor_skips if pbt else 0, num_no_donor=pbt.num_no_donor if pbt else 0)
        return out

    def wait_status(self, after_seq: int = -1, timeout_s: float = 10.0) -> dict[str, Any]:
        """The status once something changed past `after_seq` (or after `timeout_s`, at most 60 s)."""
        self.store.wait_for_save(after_seq, timeout_s)
        return self.status()

    def stop(self) -> dict[str, Any]:
        """Stop the experiment: every running trial stops with a checkpoint (PAUSED)."""
        self._stop_cause = self._stop_cause or TunerStop.STOPPED
        self._stop.set()
        self._wake.set()
        return self.status()

    def __ftrl_drain__(self) -> dict[str, Any]:
        """This node is pre-empted: save and leave the trials running; the next
        incarnation (elsewhere) adopts them."""
        self._stop_cause = self._stop_cause or TunerStop.DRAINED
        self._stop.set()
        self._wake.set()
        self.store.wait_closed(30.0)
        return self.status()


class _ClusterPeers:
    """What the exploits need, on the cluster: calls to the trials' drivers through the
    client (every answer wakes the tuner's loop) and the experiment's files."""

    def __init__(self, client: Any, expdir: Path, wake: threading.Event, save: Callable[[], None]):
        self._client = client
        self._expdir = expdir
        self._wake = wake
        self.save = save

    def ask(self, actor: str, method: str, *args: Any, timeout_s: float) -> Future:
        future = self._client.get_actor(actor).options(timeout=timeout_s).submit(method, *args)
        future.add_done_callback(lambda _: self._wake.set())
        return future

    def pin(self, donor: str, checkpoint: str) -> str:
        return str(pin_checkpoint(self._expdir, donor, checkpoint))

    def append_lineage(self, row: dict[str, Any]) -> None:
        append_lineage(self._expdir, row)
