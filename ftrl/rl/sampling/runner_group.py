"""EnvRunnerGroup: the fault-tolerance policy over remote env runner handles.

An `ActorGroup` (`rl.actor_group`: names, creation, strict handles, parallel calls,
teardown) with RLlib's policy on top. The group never talks to the runtime except
through handles (`call`, `submit`, `options(timeout=)`, `wait_alive`) and the client's
`create_actor` / `kill_actor`. Its jobs live in their own modules, put together here:

- `runner_core`: slots, state, the failure policy and background recovery;
- `sample_rounds`: `harvest()` (non-blocking) and `sample()` (a synchronous round);
- `runner_eval`: `evaluate()`;
- `runner_scale`: `scale()` / `apply_scale()`;
- `runner_channels`: the sample channel to each runner incarnation;
- `ftrl.rl.weights.sync` (`sync_weights`): weights over RPC, the broadcast tree
  (`ftrl.rl.weights.tree`) or the weights plane.

Policy (RLlib's option names and meaning):
- `restart_failed_env_runners=True` (default): runners are created with
  `max_restarts=max_num_env_runner_restarts`; the runtime restarts a dead process in
  place. A failed runner is *recovering*: a background task waits for it
  (`wait_alive`, which adopts the new incarnation), pushes the latest weights and filter
  state, and only then marks it healthy, so it never samples with stale weights. A
  runner whose user code raised (process alive) is soft-restarted with `reset_envs`.
  A runner that becomes DEAD (out of restarts) is an error.
- `ignore_env_runner_failures=True`: a failed runner is dropped (killed) and training
  goes on with the rest.
- neither: the first runner failure raises.
- `num_consecutive_env_runner_failures_tolerance`: a runner failing that many times in
  a row (no successful sample in between), or that many waits with no healthy runner
  at all, raises `EnvRunnerFailureError`.

Sampling is in synchronous rounds (`sample()`), or continuous (`harvest()` in a loop);
see `ftrl.rl.sampling.sample_rounds`. Every fragment carries the weights version it was
sampled with; one sampled with weights more than `max_weights_lag` versions behind is
dropped and counted (never used silently, never lost silently).

Scaling (`scale(n)`, thread-safe; applied by `apply_scale()` on the driver thread at an
iteration boundary): see `ftrl.rl.sampling.runner_scale`.

Samples travel on each runner's sample channel (`ftrl.rl.sampling.runner_channels`)
where there is one, else by RPC. Weights travel down a broadcast tree, or on the
weights plane when large (`ftrl.rl.weights.sync`); the runners that did not confirm are
sent to directly, whose failures go through the usual policy.
"""

from __future__ import annotations

import logging
from typing import Any

from ftrl.rl.actor_group import ActorSlot, describe_error
from ftrl.rl.sampling.runner_channels import close_channel
from ftrl.rl.sampling.runner_core import EnvRunnerFailureError, RunnerSlot
from ftrl.rl.sampling.runner_eval import Evaluation
from ftrl.rl.sampling.runner_scale import Scaling
from ftrl.rl.sampling.sample_rounds import Harvest, SampleRounds
from ftrl.wire.errors import (
    ActorUnavailableError,
    FtrlError,
    FtrlTimeoutError,
    StaleIncarnationError,
)

__all__ = ["EnvRunnerFailureError", "EnvRunnerGroup", "Harvest", "RunnerSlot"]

log = logging.getLogger(__name__)


class EnvRunnerGroup(SampleRounds, Evaluation, Scaling):
    """Remote env runners (training or evaluation) and their failure handling.

    Args:
        client: the cluster client (or an in-process LocalClient).
        config: the algorithm config the runners are built from.
        job_name: runners are `JOB/env_runner/I` (`JOB/eval_runner/I` with `evaluation`).
        space_spec: the spaces the driver expects (`SpaceSpec.to_dict()`).
        evaluation: a group of evaluation runners.
        actor_class: the runner class (`EnvRunner`, or one with its methods).
    """

    # ------------------------------------------------------------------ creation

    # Runners are created by `ActorGroup.create`, with strict handles: a restarted runner
    # answers StaleIncarnationError until it was resynced, so it never samples stale weights.

    def actor_kwargs(self, slot: ActorSlot) -> dict[str, Any]:
        return {**super().actor_kwargs(slot), "worker_index": slot.index}

    def start(self, previous: list[dict[str, Any]] | None = None) -> None:
        """Create every runner (re-attaching to the ones still up); with
        `validate_env_runners_after_construction`, probe them all and raise if any is not
        healthy. Without it, failed ones start recovering. `previous`: the incarnations a
        previous driver knew (`known_incarnations`); a runner that restarted since counts
        as restarted and failed (`reconcile`)."""
        validate = self.config.env_runners_cfg.validate_env_runners_after_construction
        errors: list[str] = []
        creating = self.create_all(self.slots)
        for slot in self.slots:  # created in parallel: each may take a process start
            try:
                creating[slot.name].result()
            except FtrlError as e:
                errors.append(f"{slot.name}: {describe_error(e)}")
                slot.last_error = describe_error(e)
                slot.state = "recovering" if not validate else "new"
        if previous:
            self.reconcile(previous)
        created = {s.name: s.handle for s in self.slots if s.handle is not None}
        pinged, ping_errors = self.call_all(created, "ping", timeout=self.probe_timeout)
        retry: list[RunnerSlot] = []
        for slot in self.slots:
            if slot.name in pinged:
                slot.state = "healthy"
                continue
            e = ping_errors.get(slot.name)
            if e is None:
                continue
            slot.last_error = describe_error(e)
            slot.state = "recovering"
            if isinstance(e, (ActorUnavailableError, StaleIncarnationError, FtrlTimeoutError)) and self.restart:
                # died right after starting: with restarts on, give it one chance to come back
                retry.append(slot)
            else:
                errors.append(f"{slot.name}: {describe_error(e)}")
        for slot in retry:
            try:
                back = self._recover(slot, soft=False)
            except FtrlError as e:
                errors.append(f"{slot.name}: {describe_error(e)}")
                slot.last_error = describe_error(e)
                continue
            if back.incarnation != slot.incarnation:
                restarted = max(1, back.restarts - slot.runtime_restarts)
                self.num_env_runner_restarts += restarted
                slot.runtime_restarts += restarted
            self._adopt(slot, back)
        if errors and validate:
            raise EnvRunnerFailureError(
                f"{len(errors)} of {self.num_runners} {self.kind}s are not healthy after "
                "construction (set validate_env_runners_after_construction=False to go on "
                "without them):\n  " + "\n  ".join(errors)
            )
        for slot in self.slots:
            if slot.state == "recovering":
                self._start_recovery(slot, None)

    # ------------------------------------------------------------------ counters

    def stats(self) -> dict[str, Any]:
        return {
            "num_healthy_env_runners" if not self.evaluation else "num_healthy_eval_runners": self.num_healthy,
            "num_env_runner_restarts": self.num_env_runner_restarts,
            "num_env_runner_failures": self.num_env_runner_failures,
            "num_sub_env_restarts": self.num_sub_env_restarts,
            "num_samples_late": self.num_samples_late,
            "num_samples_dropped": self.num_samples_dropped,
            "env_steps_dropped": self.env_steps_dropped,
            "num_samples_lost": self.num_samples_lost,
        }

    _COUNTERS = (
        "num_env_runner_restarts",
        "num_env_runner_failures",
        "num_sub_env_restarts",
        "num_samples_late",
        "num_samples_dropped",
        "env_steps_dropped",
        "num_samples_lost",
    )

    def get_counters(self) -> dict[str, int]:
        """The cumulative failure counters (for checkpoints)."""
        return {k: int(getattr(self, k)) for k in self._COUNTERS}

    def set_counters(self, counters: dict[str, Any]) -> None:
        """Continue from checkpointed counters (added to what happened since start)."""
        for key in self._COUNTERS:
            if key in counters:
                setattr(self, key, getattr(self, key) + int(counters[key]))

    def known_incarnations(self) -> list[dict[str, Any]]:
        """The incarnation of each runner as the group last adopted it, with the runtime's
        restart count of the actor then (a driver state holds them: `reconcile`)."""
        return [{"name": s.name, "incarnation": int(s.incarnation), "restarts": int(s.runtime_restarts)}
                for s in self.slots if s.handle is not None and s.incarnation > 0]

    def reconcile(self, previous: list[dict[str, Any]]) -> int:
        """Count the runners that restarted while no driver watched: each runner whose
        incarnation is not the one `previous` (`known_incarnations` of the driver state
        resumed from) names counts its restarts since then (the runtime's count, at least
        one) as restarts and failures. Returns how many were counted."""
        known = {str(p.get("name")): p for p in previous if isinstance(p, dict)}
        counted = 0
        for slot in self.slots:
            before = known.get(slot.name)
            if before is None or slot.handle is None or slot.incarnation == int(before.get("incarnation", 0)):
                continue
            restarts = max(1, slot.runtime_restarts - int(before.get("restarts", 0)))
            self.num_env_runner_restarts += restarts
            self.num_env_runner_failures += restarts
            slot.restarts += restarts
            counted += restarts
            log.info("%s restarted while the driver was away (incarnation %s -> %d): counted %d",
                     slot.name, before.get("incarnation"), slot.incarnation, restarts)
        return counted

    def newest_synced_filter(self) -> tuple[int, dict[str, Any]] | None:
        """(weights version, observation filter state) of the healthy runner synced last
        (what the driver pushed with those weights), or None when no runner can tell."""
        handles = {s.name: s.handle for s in self.healthy() if s.inflight is None}
        results, _ = self.call_all(handles, "synced_filter", timeout=self.probe_timeout)
        best: tuple[int, dict[str, Any]] | None = None
        for result in results.values():
            if isinstance(result, dict) and isinstance(result.get("filter"), dict):
                version = int(result.get("weights_version", -1))
                if best is None or version > best[0]:
                    best = (version, result["filter"])
        return best

    # ------------------------------------------------------------------ misc

    def probe(self) -> dict[str, Any]:
        """Ping every healthy runner (probe timeout); failures start recovery."""
        idle = [s for s in self.healthy() if s.inflight is None]
        out, errors = self.call_all({s.name: s.handle for s in idle}, "ping", timeout=self.probe_timeout)
        for slot in idle:
            if slot.name in errors:
                self._on_failure(slot, errors[slot.name], "ping")
        return out

    def foreach_runner(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> dict[str, Any]:
        """Call `method` on every healthy idle runner; {name: result or the error}."""
        timeout = self.probe_timeout if timeout is None else timeout
        handles = {s.name: s.handle for s in self.healthy() if s.inflight is None}
        results, errors = self.call_all(handles, method, *args, timeout=timeout, **kwargs)
        return {name: results[name] if name in results else errors[name] for name in handles}

    def stop(self, kill: bool = True) -> None:
        """Stop background work and the weights plane; with `kill`, also kill the runner
        actors. Runners scaled away and still finishing a sample are killed either way."""
        self._weights.close()
        for slot in self.slots:
            close_channel(slot)
        if kill:
            for slot in self.slots:
                if slot.handle is None:  # still being created: its recovery kills it once it is
                    slot.state = "retired"
        for slot, _ in self._retiring:
            self._kill_retired(slot)
        self._retiring = []
        super().stop(kill)
