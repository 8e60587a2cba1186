"""The experiment's scheduler as an actor: `"ftrl.tune.controller:TuneController"`,
named `NAME/tuner`, created by `ftrl.Tuner.fit()` (or `ftrl tune`) and restarted in
place by the runtime when it dies: everything it decides is in `experiment.json`
before it acts on it (ftrl.tune.experiment), so an incarnation carries on where the
last one stopped.

One loop, every POLL_S seconds (three coordinator calls: jobs, actors, nodes):

1. follow every RUNNING trial through its job record: the newest metrics row (the
   score PBT ranks by), the end of the job (TERMINATED when a stop criterion ended it;
   a FAILED job is retried from its newest checkpoint up to max_failures, then ERROR);
2. a trial whose runner or learner waits for a node that is gone (its node was lost
   or pre-empted and no other node has room) is pre-empted: its job is stopped, and
   the trial goes back to the FRONT of the queue, to resume from its newest
   checkpoint when there is room again (not counted as a failure); the other trials
   never pause;
3. PBT: a trial at a perturbation point in the bottom quantile clones a top-quantile
   donor IN PLACE (the donor checkpoints now; the target's driver loads that
   checkpoint and the explored hyperparameters at its next iteration boundary, its
   runners and learners stay up). The calls run beside the loop (`_Exploit`, moved
   on at every pass and woken by their answers), so a slow donor never delays what
   the loop watches. A donor checkpoint that is missing, unreadable or over-age is
   never used: the next donor is tried, the skip logged and counted. Every exploit
   is a row of lineage.jsonl; the donor's checkpoint is pinned (kept for good under
   the donor's pinned/ folder);
4. PENDING trials start while the cluster has room (CPUs and GPUs of ALIVE nodes,
   minus what other jobs use) and fewer than max_concurrent_trials run.

The experiment ends FINISHED when every trial is TERMINATED or ERROR; `stop()` stops
every running trial with a checkpoint (PAUSED: `Tuner.restore` / `ftrl tune --resume`
continues them) and ends it STOPPED. Imports no torch.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftrl.tune import schedulers as sched
from ftrl.tune.experiment import (
    DRIVER_STOPS,
    Trial,
    append_lineage,
    pin_checkpoint,
    read_state,
    row_key,
    write_state,
)
from ftrl.util.run_dir import has_saved_state
from ftrl.wire.errors import (
    AlreadyExistsError,
    ConfigError,
    FtrlError,
    FtrlTimeoutError,
    InvalidArgumentError,
)

log = logging.getLogger(__name__)

TUNER_CLASS = "ftrl.tune.controller:TuneController"
POLL_S = 0.25
#: How long a trial's actor may wait for a node that is gone before the trial is pre-empted.
LOST_GRACE_S = 1.0
#: How long a donor may take to reach its next iteration boundary and checkpoint (the
#: loop waits meanwhile: the bound keeps pre-emptions noticed within seconds).
DONOR_TIMEOUT_S = 10.0
#: How long the target may take to reach its next boundary and load the donor.
EXPLOIT_TIMEOUT_S = 10.0
#: How long a restarted tuner waits for a target to take the exploit its predecessor decided.
REISSUE_TIMEOUT_S = 5.0
#: How long stopping the experiment waits for each trial's final checkpoint.
PAUSE_TIMEOUT_S = 120.0
MAX_SKIPS_KEPT = 100
RESULT_KEYS = ("iteration", "env_steps_sampled", "time_s", "episode_return_mean", "weights_version",
               "num_env_runner_restarts", "num_healthy_env_runners")
FINAL_STAGES = ("FINISHED", "STOPPED", "FAILED")
WAITING = ("PENDING", "RESTARTING")


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
        self.expdir = Path(experiment_dir)
        self.state = read_state(self.expdir)
        self.name: str = self.state["name"]
        spec = self.state["spec"]
        self.base_job: dict[str, Any] = spec["base_job"]
        self.stop_dict = {row_key(k): v for k, v in (spec.get("stop") or {}).items()}
        self.max_failures = int(spec.get("max_failures", 0))
        self.max_concurrent = spec.get("max_concurrent_trials")
        self.metric: str = self.state["metric"]
        self.mode: str = self.state["mode"]
        self.live_keys = set(spec.get("live_keys") or [])
        self.scheduler = sched.scheduler_from_dict(self.state["scheduler"])
        self.pbt = self.scheduler if isinstance(self.scheduler, sched.PopulationBasedTraining) else None
        self.trials: dict[str, Trial] = {tid: Trial.from_dict(t) for tid, t in self.state["trials"].items()}
        self.pbt_state = None
        if self.pbt is not None:
            saved = self.state.get("pbt")
            self.pbt_state = sched.PBTState.from_dict(saved) if saved else sched.PBTState.for_scheduler(self.pbt)
            for trial in self.trials.values():
                if trial.trial_id not in self.pbt_state.members:
                    self.pbt_state.members[trial.trial_id] = sched.Member(
                        trial.trial_id, alive=False, config=dict(trial.config))
        saved = self.state.get("counters", {})  # PBT's own counts live in the PBT state
        self.counters: dict[str, int] = {k: int(saved.get(k, 0)) for k in ("num_preemptions", "num_trial_failures")}
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and by every answer of an exploit call
        self._exploits: dict[str, _Exploit] = {}  # in flight, by target
        self._stop_reason = ""
        self._cond = threading.Condition()
        self._seq = 0
        self._waiting_since: dict[str, float] = {}  # actor name -> when it was first seen stranded
        self._stopping: dict[str, str] = {}  # trial id -> why the tuner stopped its job
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._main, name="ftrl-tuner", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the state on disk

    def _save(self) -> None:
        """experiment.json, atomically: the whole state, before any decision is acted on."""
        self.state["trials"] = {tid: t.to_dict() for tid, t in self.trials.items()}
        self.state["counters"] = self.all_counters()
        if self.pbt_state is not None:
            self.state["pbt"] = self.pbt_state.to_dict()
        self.state["tuner_incarnation"] = self.incarnation
        write_state(self.expdir, self.state)
        with self._cond:
            self._seq += 1
            self._cond.notify_all()

    # ------------------------------------------------------------------ the loop

    def _main(self) -> None:
        failed = False
        adopted = False
        try:
            self.state["status"] = "RUNNING"
            self.state.setdefault("started_at", time.time())
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
                if self._all_done():
                    self.state["status"] = "FINISHED"
                    break
                if changed:
                    self._save()
                self._wake.wait(POLL_S)
                self._wake.clear()
            if self._stop_reason == "stopped":
                self._pause_all()
                self.state["status"] = "STOPPED"
            elif self._stop_reason == "drained":
                log.warning("tuner of %s drained: the next incarnation goes on", self.name)
        except BaseException as e:  # a bug: record it; the process exits and is restarted in place
            failed = True
            log.exception("tuner of %s failed", self.name)
            self.state["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"[:8000]
        finally:
            try:
                self._save()
            finally:
                with self._cond:
                    self._done.set()
                    self._cond.notify_all()
        if failed:
            logging.shutdown()
            os._exit(70)  # the worker restarts this actor from experiment.json (max_restarts)

    def _step(self) -> bool:
        """One pass: follow, pre-empt, perturb, place. Whether anything changed."""
        jobs = {j["job_id"]: j for j in self.client.jobs() if j["job_id"] in self.trials}
        all_actors = self.client.actors()
        actors = [a for a in all_actors if a["name"].split("/", 1)[0] in self.trials]
        nodes = {n["node_id"]: n for n in self.client.nodes()}
        by_trial: dict[str, list[dict[str, Any]]] = {}
        for a in actors:
            by_trial.setdefault(a["name"].split("/", 1)[0], []).append(a)
        changed = False
        fresh: list[str] = []
        for trial in list(self.trials.values()):
            if trial.status != "RUNNING":
                continue
            outcome = self._follow(trial, jobs.get(trial.trial_id), by_trial.get(trial.trial_id, []), nodes)
            changed |= outcome != ""
            if outcome == "result":
                fresh.append(trial.trial_id)
        if self.pbt is not None and fresh:
            changed |= self._perturb(fresh)
        if self._exploits:
            changed |= self._advance_exploits()
        changed |= self._place(nodes, all_actors, jobs)
        return changed

    def _all_done(self) -> bool:
        return all(t.status in ("TERMINATED", "ERROR") for t in self.trials.values())

    # ------------------------------------------------------------------ following trials

    def _follow(self, trial: Trial, job: dict[str, Any] | None, actors: list[dict[str, Any]],
                nodes: dict[str, dict[str, Any]]) -> str:
        """Update a RUNNING trial from its job: "" (nothing new), "result" (a new row),
        or "ended" (the job ended or the trial was pre-empted)."""
        tid = trial.trial_id
        if job is None:  # the coordinator forgot the job (restarted without its state)
            self._requeue(trial, "its job is unknown to the coordinator", preempted=True)
            return "ended"
        outcome = ""
        row = job.get("metrics") or {}
        if isinstance(row, dict) and row.get("iteration", 0) > trial.last_result.get("iteration", 0):
            self._take_row(trial, row)
            outcome = "result"
            reached = self._stop_reached(row)
            if reached and tid not in self._stopping and job["stage"] not in FINAL_STAGES:
                log.info("trial %s reached %s", tid, reached)
                self._stopping[tid] = "stop"
                self._call(lambda: self.client.stop(tid, reason=f"tune stop: {reached}"))
        driver = next((a for a in actors if a["name"] == f"{tid}/algorithm"), None)
        if driver is not None and driver.get("node_id"):
            trial.node = driver["node_id"]
        stage = job["stage"]
        if stage == "FINISHED" or (stage == "STOPPED" and self._stopping.get(tid) in ("stop", None)):
            self._stopping.pop(tid, None)
            trial.status = "TERMINATED"
            trial.error = "" if stage == "FINISHED" else (job.get("reason") or "stopped")
            self._member_dead(tid)
            log.info("trial %s TERMINATED (%s)", tid, job.get("reason", ""))
            return "ended"
        if stage == "STOPPED":
            return outcome
        if stage == "FAILED":
            trial.num_failures += 1
            self.counters["num_trial_failures"] += 1
            reason = (job.get("reason") or "failed")[:2000]
            if trial.num_failures > self.max_failures:
                trial.status, trial.error = "ERROR", reason
                self._member_dead(tid)
                log.error("trial %s ERROR after %d failures: %s", tid, trial.num_failures, reason)
            else:
                self._requeue(trial, f"failed ({reason})", preempted=False)
            return "ended"
        stranded = self._stranded(actors, nodes)
        if stranded:
            self._preempt(trial, stranded)
            return "ended"
        return outcome

    def _take_row(self, trial: Trial, row: dict[str, Any]) -> None:
        trial.last_result = {k: row[k] for k in (*RESULT_KEYS, self.metric) if k in row}
        value = row.get(self.metric)
        if isinstance(value, int | float) and not math.isnan(value):
            better = trial.best_metric is None or (
                value > trial.best_metric if self.mode == "max" else value < trial.best_metric)
            if better:
                trial.best_metric = float(value)
        if self.pbt_state is not None:
            member = self.pbt_state.members[trial.trial_id]
            member.score = float(value) if isinstance(value, int | float) else None
            member.time = float(row.get(self.pbt.time_attr, 0) or 0)
            member.alive = True

    def _stop_reached(self, row: dict[str, Any]) -> str:
        """The first stop-dict key `row` reached (Ray Tune's rule: >=), or ""."""
        for key, bound in self.stop_dict.items():
            value = row.get(key)
            if isinstance(value, int | float) and value >= bound:
                return f"{key} {value} >= {bound}"
        return ""

    def _stranded(self, actors: list[dict[str, Any]], nodes: dict[str, dict[str, Any]]) -> list[str]:
        """The trial's actors that wait for a node that is not ALIVE (longer than LOST_GRACE_S)."""
        now = time.monotonic()
        out = []
        for a in actors:
            node = nodes.get(a.get("node_id") or "")
            if a["state"] in WAITING and (node is None or node["state"] != "ALIVE"):
                since = self._waiting_since.setdefault(a["name"], now)
                if now - since >= LOST_GRACE_S:
                    out.append(a["name"])
            else:
                self._waiting_since.pop(a["name"], None)
        return out

    def _preempt(self, trial: Trial, stranded: list[str]) -> None:
        """Its node is gone and no node has room: stop the trial's job; back to the front
        of the queue, to resume from its newest checkpoint (not a failure)."""
        log.warning("trial %s pre-empted: %s wait(s) for a lost node", trial.trial_id, ", ".join(stranded))
        self._stop_job(trial.trial_id, "pre-empted: its node was lost")
        self._requeue(trial, "pre-empted", preempted=True)

    def _stop_job(self, tid: str, reason: str) -> None:
        self._stopping[tid] = "preempt"
        self._call(lambda: self.client.stop(tid, reason=reason))
        self._call(lambda: self.client.kill_actor(f"{tid}/algorithm", reason))

    def _requeue(self, trial: Trial, why: str, preempted: bool) -> None:
        trial.status = "PENDING"
        trial.queued_at = time.time()
        if preempted:
            trial.num_preemptions += 1
            self.counters["num_preemptions"] += 1
        self._member_dead(trial.trial_id)
        log.warning("trial %s back to the front of the queue: %s", trial.trial_id, why)

    def _member_dead(self, tid: str) -> None:
        if self.pbt_state is not None:
            self.pbt_state.members[tid].alive = False
        self.state.setdefault("pending_exploits", {}).pop(tid, None)

    def _call(self, fn: Any) -> Any:
        """A coordinator call whose failure is logged, not raised (the next pass retries)."""
        try:
            return fn()
        except (FtrlError, OSError) as e:
            log.warning("tuner of %s: %s", self.name, e)
            return None

    # ------------------------------------------------------------------ PBT

    def _perturb(self, fresh: list[str]) -> bool:
        """Exploit and explore for the trials that just reported (synch: all at the
        barrier). An exploit runs alongside the loop (`_advance_exploits`)."""
        members = self.pbt_state.members
        if self.pbt.synch:
            if not sched.synch_ready(list(members.values()), self.pbt):
                return False
            targets = sorted(t for t, m in members.items() if m.alive and sched.ready(m, self.pbt))
        else:
            targets = [t for t in fresh if sched.ready(members[t], self.pbt)]
        changed = False
        for target in targets:
            if target in self._exploits:  # one exploit at a time per target
                continue
            candidates = sched.decide(target, self.pbt_state, self.pbt)
            changed = True
            if candidates:
                self._exploits[target] = _Exploit(target, list(candidates), asked=time.time(), t0=time.monotonic())
        return changed

    def _advance_exploits(self) -> bool:
        """Move every exploit in flight one step on (none waits): ask the next donor for a
        checkpoint; check the checkpoint; have the target load it; record the result."""
        changed = False
        for target, ex in list(self._exploits.items()):
            if self.trials[target].status != "RUNNING":
                del self._exploits[target]  # pre-empted or ended meanwhile
                self.state.setdefault("pending_exploits", {}).pop(target, None)
                changed = True
                continue
            if ex.future is not None and not ex.future.done():
                if time.monotonic() - ex.since < ex.timeout_s + 10.0:
                    continue
                ex.future.cancel()
                error: BaseException | None = FtrlTimeoutError(f"no answer within {ex.timeout_s + 10:g}s")
                reply = None
            elif ex.future is not None:
                error = ex.future.exception()
                reply = None if error is not None else ex.future.result()
            else:
                error, reply = None, None
            changed = True
            if ex.stage == "checkpoint":
                self._donor_answered(ex, reply, error)
            elif ex.stage == "load":
                self._target_answered(ex, reply, error)
            if ex.stage == "":
                self._next_donor(ex)
            if ex.stage == "done":
                del self._exploits[target]
        return changed

    def _ask(self, ex: _Exploit, actor: str, method: str, *args: Any, timeout_s: float) -> None:
        handle = self.client.get_actor(actor).options(timeout=timeout_s + 10.0)
        ex.future = handle.submit(method, *args)
        ex.future.add_done_callback(lambda _: self._wake.set())
        ex.since, ex.timeout_s = time.monotonic(), timeout_s

    def _next_donor(self, ex: _Exploit) -> None:
        """Ask the next candidate for a checkpoint now (its newest known one if it is
        not running); none left: this perturbation has no donor."""
        ex.future = None
        while ex.candidates:
            ex.donor = ex.candidates.pop(0)
            if self.trials[ex.donor].status == "RUNNING":
                try:
                    self._ask(ex, f"{ex.donor}/algorithm", "checkpoint_now", DONOR_TIMEOUT_S, timeout_s=DONOR_TIMEOUT_S)
                    ex.stage = "checkpoint"
                    return
                except FtrlError as e:
                    log.warning("donor %s could not be asked for a checkpoint (%s)", ex.donor, e)
            ex.stage = "checkpoint"
            self._donor_answered(ex, None, None)
            if ex.stage != "":
                return
        self.pbt_state.num_no_donor += 1
        log.info("exploit of %s: no usable donor", ex.target)
        ex.stage = "done"

    def _donor_answered(self, ex: _Exploit, info: Any, error: BaseException | None) -> None:
        """The donor's fresh checkpoint (or, failing that, its newest known one): skip it
        if missing, unreadable or over-age; else pin it and have the target load it."""
        donor = self.trials[ex.donor]
        if error is not None:
            log.warning("donor %s could not checkpoint now (%s); its newest checkpoint is considered", ex.donor, error)
        if isinstance(info, dict) and info.get("path"):
            attr = self.pbt.time_attr
            donor.last_checkpoint = {"path": str(info["path"]), "iteration": info.get("iteration"),
                                     "time": float(info.get(attr, info.get("iteration", 0)) or 0),
                                     "saved_at": info.get("saved_at", time.time())}
        checkpoint = dict(donor.last_checkpoint) if donor.last_checkpoint else None
        member = self.pbt_state.members[ex.donor]
        reason = sched.checkpoint_usable(checkpoint, member, self.pbt)
        if reason is not None:
            self._skip(ex.target, ex.donor, reason, checkpoint)
            ex.stage = ""
            return
        ex.checkpoint = checkpoint
        ex.pinned = str(pin_checkpoint(self.expdir, ex.donor, checkpoint["path"]))
        explored = sched.explore(dict(member.config), self.pbt, self.pbt_state.rng)
        ex.hyperparams = {k: v for k, v in explored.items() if k in self.live_keys}
        self.state.setdefault("pending_exploits", {})[ex.target] = {
            "donor": ex.donor, "checkpoint": ex.pinned, "hyperparams": ex.hyperparams, "asked": ex.asked}
        self._save()  # the decision is durable before it is acted on
        try:
            self._ask(ex, f"{ex.target}/algorithm", "exploit", ex.pinned, ex.hyperparams, EXPLOIT_TIMEOUT_S,
                      timeout_s=EXPLOIT_TIMEOUT_S)
            ex.stage = "load"
        except FtrlError as e:
            self._target_answered(ex, None, e)

    def _target_answered(self, ex: _Exploit, reply: Any, error: BaseException | None) -> None:
        self.state.setdefault("pending_exploits", {}).pop(ex.target, None)
        if error is not None:
            if _checkpoint_refused(error):  # the target verified it (checksum, contents): a bad donor
                self._skip(ex.target, ex.donor, f"unreadable: {error}", ex.checkpoint)
                ex.stage = ""
            else:
                log.warning("exploit of %s by %s failed: %s", ex.target, ex.donor, error)
                ex.stage = "done"
            return
        members = self.pbt_state.members
        trial = self.trials[ex.target]
        old = dict(trial.config)
        new = {**old, **ex.hyperparams}
        applied_at = reply.get("applied_at") if isinstance(reply, dict) else None
        latency = (applied_at - ex.asked) if isinstance(applied_at, int | float) else time.monotonic() - ex.t0
        trial.config = new
        trial.num_exploits += 1
        sched.record_exploit(self.pbt_state, ex.target, ex.donor, new)
        members[ex.target].score = members[ex.donor].score
        checkpoint = ex.checkpoint or {}
        append_lineage(self.expdir, {
            "time": time.time(), "target": ex.target, "donor": ex.donor,
            "donor_checkpoint": ex.pinned, "donor_checkpoint_iteration": checkpoint.get("iteration"),
            "donor_checkpoint_time": checkpoint.get("time"),
            "donor_checkpoint_age_s": round(max(0.0, ex.asked - float(checkpoint.get("saved_at") or ex.asked)), 3),
            "donor_score": members[ex.donor].score,
            "donor_iteration": self.trials[ex.donor].last_result.get("iteration"),
            "target_iteration": trial.last_result.get("iteration"), "target_time": members[ex.target].time,
            "target_env_steps": trial.last_result.get("env_steps_sampled"),
            "old_config": old, "new_config": new, "latency_s": round(max(0.0, latency), 3),
            "weights_version": reply.get("weights_version") if isinstance(reply, dict) else None,
        })
        log.info("exploit: %s <- %s (checkpoint iteration %s) in %.2fs; %s -> %s", ex.target, ex.donor,
                 checkpoint.get("iteration"), latency, old, new)
        ex.stage = "done"

    def _skip(self, target: str, donor: str, reason: str, checkpoint: dict[str, Any] | None) -> None:
        sched.record_skip(self.pbt_state, target, donor, reason)
        log.warning("exploit of %s: donor %s skipped: %s", target, donor, reason)
        skips = self.state.setdefault("skips", [])
        skips.append({"time": time.time(), "target": target, "donor": donor, "reason": reason,
                      "checkpoint": (checkpoint or {}).get("path")})
        del skips[:-MAX_SKIPS_KEPT]

    # ------------------------------------------------------------------ placing trials

    def _place(self, nodes: dict[str, dict[str, Any]], all_actors: list[dict[str, Any]],
               jobs: dict[str, dict[str, Any]]) -> bool:
        """Start PENDING trials (those that ran before first) while they fit."""
        pending = sorted((t for t in self.trials.values() if t.status == "PENDING"),
                         key=lambda t: (t.started_at is None, t.queued_at, t.index))
        if not pending:
            return False
        running = [t for t in self.trials.values() if t.status == "RUNNING"]
        free = self._free(nodes, all_actors, running)
        changed = False
        for trial in pending:
            if self.max_concurrent and len(running) >= int(self.max_concurrent):
                break
            need = trial_resources(trial)
            if any(need.get(k, 0.0) > free.get(k, 0.0) + 1e-9 for k in need):
                break  # the front of the queue waits for room: none jumps it
            if not self._start(trial, jobs.get(trial.trial_id)):
                break
            for k, v in need.items():
                free[k] = free.get(k, 0.0) - v
            running.append(trial)
            changed = True
        return changed

    def _free(self, nodes: dict[str, dict[str, Any]], all_actors: list[dict[str, Any]],
              running: list[Trial]) -> dict[str, float]:
        """CPUs and GPUs of the ALIVE nodes not used by other actors nor held by our
        RUNNING trials (counted whole, whether or not their actors exist yet)."""
        total: dict[str, float] = {"cpu": 0.0, "gpu": 0.0}
        alive = {nid for nid, node in nodes.items() if node["state"] == "ALIVE"}
        for nid in alive:
            for key in total:
                total[key] += float(nodes[nid].get("resources", {}).get(key, 0.0))
        for a in all_actors:
            if a["name"].split("/", 1)[0] in self.trials or a["state"] == "DEAD" or a.get("node_id") not in alive:
                continue
            for key in total:
                total[key] -= float((a.get("resources") or {}).get(key, 0.0))
        for trial in running:
            for key, value in trial_resources(trial).items():
                total[key] = total.get(key, 0.0) - value
        return total

    def _start(self, trial: Trial, job: dict[str, Any] | None) -> bool:
        """Submit the trial's job (resuming from its folder when it holds a state); a job
        of the trial that still runs is followed instead, or waited for while it stops."""
        tid = trial.trial_id
        resume = has_saved_state(trial.output_dir)
        if job is not None and job["stage"] not in FINAL_STAGES:
            if job.get("stop_requested"):
                return False  # its last run (pre-empted, paused) is still stopping
            log.info("trial %s: its job is running; following it", tid)
        else:
            try:
                self.client.submit(self._job_dict(trial), job_id=tid, output_dir=trial.output_dir, resume=resume)
            except AlreadyExistsError:
                return False  # the last run's actors are still being stopped
            except ConfigError as e:
                trial.status, trial.error = "ERROR", f"config error: {e}"
                return True
            except (FtrlError, OSError) as e:
                log.warning("trial %s could not be submitted yet: %s", tid, e)
                return False
            log.info("trial %s started%s with %s", tid, " (resuming)" if resume else "", trial.config)
        self._stopping.pop(tid, None)
        trial.status = "RUNNING"
        trial.started_at = trial.started_at or time.time()
        if self.pbt_state is not None:
            self.pbt_state.members[tid].alive = True
        return True

    def _job_dict(self, trial: Trial) -> dict[str, Any]:
        job = {k: v for k, v in self.base_job.items() if k != "stop"}
        job.update(trial.config)
        stop = dict(self.base_job.get("stop") or {})
        for key, bound in self.stop_dict.items():
            name = DRIVER_STOPS.get(key)
            if name is not None:
                stop[name] = int(bound) if name != "stop_reward" else float(bound)
            elif key == "episode_return_mean" and self.mode == "max":
                stop["stop_reward"] = float(bound)
        job["stop"] = stop
        return job

    def _adopt(self) -> None:
        """Start (or restart) of the tuner: RUNNING trials whose jobs still run are
        followed; the others, and PAUSED ones, go to the front of the queue; a pending
        exploit whose target still runs is made again."""
        jobs = {j["job_id"]: j for j in self.client.jobs()}
        for trial in self.trials.values():
            job = jobs.get(trial.trial_id)
            live = job is not None and job["stage"] not in FINAL_STAGES
            if trial.status == "RUNNING" and not live:
                if job is not None and job["stage"] == "FINISHED":
                    trial.status = "TERMINATED"
                else:
                    self._requeue(trial, "its job is not running after a restart", preempted=False)
            elif trial.status in ("PAUSED", "PENDING") and live and not job.get("stop_requested"):
                trial.status = "RUNNING"  # a job left running by an earlier incarnation
            elif trial.status == "PAUSED":
                trial.status = "PENDING"
        pending = dict(self.state.get("pending_exploits") or {})
        for target, exploit in pending.items():
            if self.trials[target].status != "RUNNING":
                self.state["pending_exploits"].pop(target, None)
                continue
            ex = _Exploit(target, [], asked=float(exploit.get("asked") or time.time()), t0=time.monotonic(),
                          donor=exploit["donor"], pinned=exploit["checkpoint"],
                          hyperparams=dict(exploit["hyperparams"]), checkpoint={"path": exploit["checkpoint"]})
            try:
                self._ask(ex, f"{target}/algorithm", "exploit", ex.pinned, ex.hyperparams, REISSUE_TIMEOUT_S,
                          timeout_s=REISSUE_TIMEOUT_S)
            except FtrlError as e:
                log.warning("pending exploit of %s dropped: %s", target, e)
                self.state["pending_exploits"].pop(target, None)
                continue
            ex.stage = "load"
            self._exploits[target] = ex
            log.info("pending exploit of %s by %s made again after a restart", target, ex.donor)

    def _pause_all(self) -> None:
        """Stop every running trial with a final checkpoint: PAUSED (a resume goes on)."""
        running = [t for t in self.trials.values() if t.status == "RUNNING"]
        for trial in running:
            self._stopping[trial.trial_id] = "pause"
            self._call(lambda tid=trial.trial_id: self.client.stop(tid, reason="experiment stopped"))
        for trial in running:
            info = self._call(lambda tid=trial.trial_id: self.client.stop(tid, wait=True, timeout=PAUSE_TIMEOUT_S))
            if info is not None and info.get("stage") == "FINISHED":
                trial.status = "TERMINATED"
            else:
                trial.status = "PAUSED"
            if info is not None and isinstance(info.get("metrics"), dict) and info["metrics"].get("iteration"):
                self._take_row(trial, info["metrics"])

    # ------------------------------------------------------------------ actor API

    def status(self) -> dict[str, Any]:
        """The experiment: status, counters, trials (id, status, config, last result), seq."""
        with self._cond:
            seq = self._seq
        return {"name": self.name, "status": self.state.get("status"), "seq": seq,
                "counters": self.all_counters(), "error": self.state.get("error", ""),
                "trials": {tid: {"status": t.status, "config": t.config, "last_result": t.last_result,
                                 "best_metric": t.best_metric, "num_exploits": t.num_exploits,
                                 "num_failures": t.num_failures, "num_preemptions": t.num_preemptions,
                                 "error": t.error, "node": t.node}
                           for tid, t in self.trials.items()},
                "done": self._done.is_set()}

    def all_counters(self) -> dict[str, int]:
        """Pre-emptions and trial failures, and PBT's perturbations, exploits and skips."""
        out = dict(self.counters)
        pbt = self.pbt_state
        out.update(num_perturbations=pbt.num_perturbations if pbt else 0, num_exploits=pbt.num_exploits if pbt else 0,
                   num_donor_skips=pbt.num_donor_skips if pbt else 0, num_no_donor=pbt.num_no_donor if pbt else 0)
        return out

    def wait_status(self, after_seq: int = -1, timeout_s: float = 10.0) -> dict[str, Any]:
        """The status once something changed past `after_seq` (or after `timeout_s`, at most 60 s)."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > after_seq or self._done.is_set(),
                                timeout=min(max(0.0, timeout_s), 60.0))
        return self.status()

    def stop(self) -> dict[str, Any]:
        """Stop the experiment: every running trial stops with a checkpoint (PAUSED)."""
        self._stop_reason = self._stop_reason or "stopped"
        self._stop.set()
        self._wake.set()
        return self.status()

    def __ftrl_drain__(self) -> dict[str, Any]:
        """This node is pre-empted: save and leave the trials running; the next
        incarnation (elsewhere) adopts them."""
        self._stop_reason = self._stop_reason or "drained"
        self._stop.set()
        self._wake.set()
        self._done.wait(30.0)
        return self.status()


@dataclass
class _Exploit:
    """One exploit in flight: the target, the donors left to try, and the call out now
    (stage "checkpoint": the donor's checkpoint_now; "load": the target's exploit)."""

    target: str
    candidates: list[str]
    asked: float  # wall time the first donor was asked
    t0: float  # monotonic, the same moment
    stage: str = ""
    donor: str = ""
    future: Future | None = None
    since: float = 0.0
    timeout_s: float = 0.0
    checkpoint: dict[str, Any] | None = None
    pinned: str = ""
    hyperparams: dict[str, Any] = field(default_factory=dict)


def trial_resources(trial: Trial) -> dict[str, float]:
    """What a trial holds while it runs (computed once, from its config, by the Tuner)."""
    return dict(trial.resources or {"cpu": 1.0})


def _checkpoint_refused(error: BaseException) -> bool:
    """Whether the target's `exploit` refused the checkpoint itself (it raises
    InvalidArgumentError for a file that does not verify or load, changing nothing)."""
    return isinstance(error, InvalidArgumentError) or str(getattr(error, "remote_type", "")).endswith(
        "InvalidArgumentError")
