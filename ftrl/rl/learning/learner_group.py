"""LearnerGroup: the driver's side of the elastic learner mesh.

It has the interface of an in-process learner (`update`, `get_weights`, `get_state`,
`set_state`, `version`), so the Algorithm does not care where learning happens.

- `num_learners` actors `JOB/learner/I` ("ftrl.rl.learning.learner_actor:LearnerActor") are
  created with `max_num_learner_restarts` (an `ActorGroup`, `rl.actor_group`: names,
  creation, strict handles, parallel calls, teardown); the runtime restarts a dead one
  in place and the new incarnation joins the mesh again after its warm-up. Membership
  is the coordinator's mesh epoch, not the group's slots: a member is called on the
  incarnation the epoch names.
- At each step boundary (`update`), the group reads the mesh from the coordinator:
  the first epoch is formed once `n_init_learners` joined, later joiners are admitted
  (`FormMesh`), and planned removals (`scale`) leave. Below `min_learners` training
  pauses (runners idle, nothing lost) for up to `learner_wait_timeout_s`.
- A new epoch is entered by every member at once: the first member holding the
  committed version is the source of a broadcast of model, Adam state and counters
  over the new group. An epoch is entered at most once: a failed attempt opens a new
  one (its store keys are spent).
- The train batch is split into one shard per member, as the algorithm's learner class
  says (`Learner.split_update`: its shards and the options every member gets, with the
  live hyperparameters the driver set, `set_hyperparams`); the update
  commits only when every member returned; otherwise it is retried whole in the next
  epoch (members roll back what they applied). A member's death is seen by the
  coordinator, which opens the next epoch at once; a hung member (collective timeout,
  no answer to pings) is evicted here.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.rl.actor_group import ActorGroup, ActorSlot
from ftrl.rl.models.check import check_model
from ftrl.rl.spaces import SpaceSpec
from ftrl.util.imports import import_class
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorUnavailableError,
    FtrlError,
    FtrlTimeoutError,
    StaleIncarnationError,
)

log = logging.getLogger(__name__)

LEARNER_CLASS = "ftrl.rl.learning.learner_actor:LearnerActor"
#: errors a member raises when another member failed (not its own fault)
COLLATERAL = ("MeshChanged", "PeerLost", "CollectiveTimeout")
PROBE_TIMEOUT_S = 3.0
MAX_CONSECUTIVE_FAILURES = 20
#: Attempts of one update at most, whatever failed: a mesh whose collectives keep failing
#: without anyone dying (a blocked port between hosts) ends the run with an error
#: instead of retrying forever.
MAX_UPDATE_ATTEMPTS = 25
GRACE_S = 5.0
#: Start failures of one learner in a row (a constructor that raised, a host that died
#: while starting) before the run ends; between them, a growing pause.
MAX_START_FAILURES = 5
LEARNER_START_TIMEOUT_S = 300.0


class LearnerGroupError(FtrlError):
    """The learner mesh cannot go on (out of learners, out of time, a failing learner)."""


class LearnerWaitTimeout(LearnerGroupError):
    """Fewer than min_learners for longer than learner_wait_timeout_s."""


def _own_failure(error: BaseException) -> bool:
    """Whether a member's failed call was its own failure, not a peer's seen from it."""
    if isinstance(error, ActorError):
        return _remote_kind(error) not in COLLATERAL
    return isinstance(error, FtrlError)


def _remote_kind(error: BaseException) -> str:
    if isinstance(error, ActorError):
        return error.remote_type.rsplit(".", 1)[-1]
    return type(error).__name__


class LearnerGroup(ActorGroup):
    """Remote learners training one policy data-parallel; see the module docstring."""

    #: live training keys set while the job runs (ftrl.config.live), sent with every update
    #: (`set_hyperparams` replaces it, never changes it in place)
    hyperparams: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, client: Any, config: AlgorithmConfig, *, job_name: str, space_spec: dict,
                 learner_class: str):
        # a model that cannot work on these spaces fails here, before any learner starts
        check_model(SpaceSpec.from_dict(space_spec), config.model_config)
        self.config = config
        lrn = config.learners_cfg
        self.job_name = job_name
        self.target = lrn.num_learners
        self.n_init = lrn.n_init_learners or lrn.num_learners
        self.min_learners = lrn.min_learners
        self.wait_timeout = lrn.learner_wait_timeout_s
        self.collective_timeout = lrn.learner_collective_timeout_s
        # whole-state calls on one learner (get/set_state of a big model): bounded, generously
        self.call_timeout = 2 * self.collective_timeout + 30.0
        self.space_spec = space_spec
        cfg_dict = config.to_dict()
        #: the algorithm's learner class: how an update is shared and its results merged
        self.learner_cls = import_class(learner_class)
        self.config_hash = self.learner_cls.mesh_config_hash(config, space_spec)
        kwargs = {"config": cfg_dict, "space_spec": space_spec, "group": f"{job_name}/learner",
                  "config_hash": self.config_hash, "learner_class": learner_class}
        resources = {"cpu": float(lrn.num_cpus_per_learner)}
        if lrn.num_gpus_per_learner:
            resources["gpu"] = float(lrn.num_gpus_per_learner)
        super().__init__(
            client, group=f"{job_name}/learner", actor_class=LEARNER_CLASS, actor_kwargs=kwargs,
            max_restarts=lrn.max_num_learner_restarts, resources=resources,
            create_options={"max_concurrency": 4, "timeout": 300.0},
            pool_size=max(4, 2 * self.target), pool_name="learner-group")
        self.slots = [ActorSlot(index=i, name=self.actor_name(i)) for i in range(self.target)]
        self.version = 0  # the committed version
        self.view: dict[str, Any] = {"epoch": 0, "members": [], "waiting": []}
        self.entered_epoch = 0
        self._spent: set[int] = set()  # epochs never to enter (again): their store keys are used
        self.restore_state: dict[str, Any] | None = None
        # loaded only when no live member holds `version` (a resumed driver: resume_at)
        self.fallback_state: dict[str, Any] | None = None
        self._restore_weights = False
        self.latest_weights: tuple[int, np.ndarray] | None = None
        self._creating: dict[str, cf.Future] = {}  # learners being created, by name
        self._start_failures: dict[str, int] = {}  # failed starts in a row, by name
        self._recreate_at: dict[str, float] = {}  # learners to create again, and when
        self._lock = threading.Lock()
        # counters (cumulative; a driver state holds them: get_counters)
        self.num_reformations = 0
        self.num_update_retries = 0
        self.num_learners_evicted = 0
        self.num_learner_restarts = 0  # incarnation changes of learners
        self.num_learner_failures = 0  # failed calls that were a learner's own (not collateral)
        self._entered_any = False  # this group (driver) entered an epoch already
        self._incarnations: dict[str, tuple[int, int]] = {}  # name -> (incarnation, runtime restarts)
        self._previous: dict[str, tuple[int, int]] = {}  # what a previous driver knew (remember_previous)
        self._failed: set[str] = set()  # learners whose own failure was counted since their last restart
        self.last_reform_s = 0.0
        self.last_update_members = 0
        self._consecutive_failures = 0
        self.backend = self.device = ""  # the mesh's, as its members reported on entering

    # ------------------------------------------------------------------ actors

    def start(self) -> None:
        """Create the learners (in the background; `update` waits for n_init of them).
        Learners of a previous driver that are still up are re-attached; the epoch they
        are in was entered by that driver, so it is spent for this one."""
        epoch = self.client.get_mesh(self.group)["epoch"]
        if epoch:
            self._spent.add(epoch)
        self._creating.update(self.create_all(self.slots))

    def _check_creations(self) -> None:
        """Collect finished creations; a learner whose start failed (not refused) is
        created again after a pause, up to MAX_START_FAILURES times in a row."""
        now = time.monotonic()
        for name, when in list(self._recreate_at.items()):
            slot = next((s for s in self.slots if s.name == name), None)
            if slot is None:  # scaled away meanwhile
                del self._recreate_at[name]
            elif when <= now and name not in self._creating:
                del self._recreate_at[name]
                log.info("learner group %s: creating %s again", self.group, name)
                self._creating.update(self.create_all([slot]))
        for name, fut in list(self._creating.items()):
            if not fut.done():
                continue
            del self._creating[name]
            try:
                fut.result()
                self._adopt_created(name)
            except FtrlError as e:
                if "refused" in str(e) or "config hash" in str(e):
                    log.error("learner %s failed to start: %s", name, e)
                    raise LearnerGroupError(f"learner {name} was refused by the mesh: {e}") from e
                failures = self._start_failures.get(name, 0) + 1
                self._start_failures[name] = failures
                if failures >= MAX_START_FAILURES:
                    raise LearnerGroupError(f"learner {name} failed to start {failures} times in a row; "
                                            f"last: {e}") from e
                pause = min(10.0, 0.5 * 2 ** failures)
                log.warning("learner %s failed to start (%d of %d): %s; creating it again in %.1fs",
                            name, failures, MAX_START_FAILURES, e, pause)
                self._recreate_at[name] = now + pause
            else:
                self._start_failures.pop(name, None)

    def _adopt_created(self, name: str) -> None:
        """A learner was created or re-attached: count it as restarted when a previous
        driver knew another incarnation of it (`resume_at`), then follow it."""
        slot = next((s for s in self.slots if s.name == name), None)
        if slot is None or slot.handle is None:
            return
        previous = self._previous.pop(name, None)
        before = previous or self._incarnations.get(name)
        if before is not None and slot.incarnation != before[0]:
            self._count_restart(name, before, slot.incarnation, slot.runtime_restarts, away=previous is not None)
        self._incarnations[name] = (slot.incarnation, slot.runtime_restarts)

    def _note_incarnations(self, view: dict[str, Any]) -> None:
        """Count each learner the mesh shows under a newer incarnation than last seen."""
        for m in [*view.get("members", []), *view.get("waiting", [])]:
            name, incarnation = str(m["name"]), int(m["incarnation"])
            before = self._incarnations.get(name)
            if before is None or incarnation <= before[0]:
                continue
            try:
                restarts = int(self.client.actor(name).get("restarts", before[1] + 1))
            except FtrlError:
                restarts = before[1] + 1  # the coordinator is away: at least one restart
            self._count_restart(name, before, incarnation, restarts, away=False)
            self._incarnations[name] = (incarnation, restarts)

    def _count_restart(self, name: str, before: tuple[int, int], incarnation: int, restarts: int,
                       away: bool) -> None:
        """Count a learner's restarts since `before` (the runtime's count, at least one);
        `away`: it restarted while no driver watched, so its failure was not counted
        either."""
        n = max(1, restarts - before[1])
        self.num_learner_restarts += n
        # every restart was a failure; the driver saw (and counted) at most one of them
        self.num_learner_failures += n - (0 if away or name not in self._failed else 1)
        self._failed.discard(name)
        log.info("learner %s restarted (incarnation %d -> %d%s): counted %d", name, before[0], incarnation,
                 ", while the driver was away" if away else "", n)

    def _handle(self, member: dict[str, Any]) -> Any:
        """A strict handle on the incarnation the epoch names (StaleIncarnationError when
        the coordinator knows a newer copy: this member is on its way out)."""
        return self.pinned(member["name"], int(member["incarnation"]))

    def _submit(self, members: list[dict[str, Any]], method: str, *args: Any, timeout: float | None = None,
                args_for: dict[str, tuple] | None = None) -> tuple[dict[str, cf.Future], dict[str, BaseException]]:
        """Start `method` on every member (`args_for`: per-member args by name), each on
        the incarnation its epoch names: (futures, errors so far) by name."""
        handles: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        for m in members:
            try:
                handles[m["name"]] = self._handle(m)
            except FtrlError as e:
                errors[m["name"]] = e
        futs, submit_errors = self.submit_all(handles, method, *args, timeout=timeout, args_for=args_for)
        errors.update(submit_errors)
        return futs, errors

    # ------------------------------------------------------------------ scaling

    def scale(self, num_learners: int) -> None:
        """Grow or shrink the group to `num_learners` at the next step boundary."""
        if num_learners < 1:
            raise LearnerGroupError("a learner group needs at least one learner")
        with self._lock:
            self.target = int(num_learners)

    def _apply_scale(self, view: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            target = self.target
        if len(self.slots) < target:
            taken = {s.index for s in self.slots}
            free = (i for i in range(10**6) if i not in taken)
            added = [ActorSlot(index=i, name=self.actor_name(i)) for i in
                     (next(free) for _ in range(target - len(self.slots)))]
            self.slots = sorted(self.slots + added, key=lambda s: s.index)
            self._creating.update(self.create_all(added))
            for slot in added:
                log.info("learner group %s: adding %s", self.group, slot.name)
        elif len(self.slots) > target:
            drop = [s.name for s in self.slots[target:]]
            log.info("learner group %s: removing %s", self.group, drop)
            # out of the mesh first; the slots are forgotten only then (a coordinator
            # outage here retries the removal at the next step boundary)
            view = self.client.form_mesh(self.group, view["epoch"], 1, remove=drop,
                                         reason=f"scaled to {target}")
            self.slots = self.slots[:target]
            for name in drop:
                fut = self._creating.pop(name, None)
                if fut is not None:
                    fut.cancel()
                try:
                    self.kill(name, reason="learner group scaled down")
                except FtrlError as e:
                    log.warning("kill_actor(%s): %s", name, e)
        return view

    # ------------------------------------------------------------------ the mesh

    def _ready_view(self) -> dict[str, Any]:
        """A mesh epoch this driver entered, with at least min_learners members. Admits
        joiners and applies scaling first (this is a step boundary). Pauses below
        min_learners, up to learner_wait_timeout_s (the very first epoch: up to
        LEARNER_START_TIMEOUT_S, as learners start, import torch and connect); at most
        MAX_UPDATE_ATTEMPTS failed entries in a row. While the coordinator is away the
        epoch already entered goes on; anything else waits for it, within the same bound."""
        wait = self.wait_timeout if self._entered_any else max(self.wait_timeout, LEARNER_START_TIMEOUT_S)
        deadline = time.monotonic() + wait
        waiting_logged = False
        failed_entries = 0
        why = "no mesh view yet"
        while True:
            self._check_creations()
            if time.monotonic() >= deadline:
                raise LearnerWaitTimeout(f"learner mesh {self.group} not ready within {wait:g}s "
                                         f"(learner_wait_timeout_s): {why}")
            try:
                view = self._apply_scale(self.client.get_mesh(self.group))
                self._note_incarnations(view)
                epoch, members, waiting = view["epoch"], view["members"], view["waiting"]
                # this driver's first epoch waits for n_init learners; later ones go on with min_learners
                need = self.min_learners if self._entered_any else self.n_init
                why = (f"{len(members)} of the {need} learners it needs; members: "
                       f"{[m['name'] for m in members]}, waiting: {[m['name'] for m in waiting]}")
                spent = epoch in self._spent
                if (epoch == 0 or waiting or spent) and len(members) + len(waiting) >= need:
                    formed = self.client.form_mesh(
                        self.group, epoch, need, reform=spent,
                        reason="initial" if epoch == 0 else "joiners admitted" if waiting else "re-formed")
                    if formed["epoch"] != epoch:
                        continue
                if epoch > 0 and not spent and len(members) >= need:
                    if epoch == self.entered_epoch or self._enter(view):
                        return view
                    failed_entries += 1
                    if failed_entries >= MAX_UPDATE_ATTEMPTS:
                        raise LearnerGroupError(f"learner mesh {self.group}: {failed_entries} epochs in a row "
                                                f"could not be entered (see the log for why)")
                    continue
                if not waiting_logged:
                    log.warning("learner mesh %s: %d members, %d waiting, need %d: training pauses",
                                self.group, len(members), len(waiting), need)
                    waiting_logged = True
                self.client.get_mesh(self.group, after_seq=view["seq"],
                                     wait_s=min(5.0, max(0.05, deadline - time.monotonic())))
            except (ActorUnavailableError, FtrlTimeoutError) as e:
                # the coordinator is away: the data plane does not need it. Go on in the
                # epoch we are in; anything else waits for it to come back.
                if self.entered_epoch and self.entered_epoch not in self._spent:
                    return self.view
                why = f"the coordinator is unreachable and the mesh must re-form: {e}"
                log.warning("learner mesh %s: coordinator unreachable (%s); waiting", self.group, e)
                time.sleep(1.0)

    def _call_all(self, members: list[dict[str, Any]], method: str, *args: Any, timeout: float | None = None,
                  args_for: dict[str, tuple] | None = None) -> tuple[dict[str, Any], dict[str, BaseException]]:
        """Call `method` on every member in parallel (`args_for`: per-member args by name);
        (results, errors) by name. Waits as `_gather` says."""
        futs, errors = self._submit(members, method, *args, timeout=timeout, args_for=args_for)
        results = self._gather(futs, errors, members)
        return results, errors

    def _gather(self, futs: dict[str, cf.Future], errors: dict[str, BaseException],
                members: list[dict[str, Any]]) -> dict[str, Any]:
        """Wait for every call; after the first failure the rest get GRACE_S (a death
        wakes them through the coordinator at once); those still silent, and members
        that made no progress for a collective timeout, are probed and evicted if hung."""
        results: dict[str, Any] = {}
        pending = dict(futs)
        grace_until = float("inf")
        quiet_since = time.monotonic()
        while pending:
            now = time.monotonic()
            timeout = min(grace_until, quiet_since + self.collective_timeout + GRACE_S) - now
            done, _ = cf.wait(list(pending.values()), timeout=max(0.0, timeout), return_when=cf.FIRST_COMPLETED)
            if done:
                quiet_since = time.monotonic()
            for name, fut in list(pending.items()):
                if fut not in done:
                    continue
                del pending[name]
                try:
                    results[name] = fut.result()
                except FtrlError as e:
                    errors[name] = e
                    grace_until = min(grace_until, time.monotonic() + GRACE_S)
            if pending and time.monotonic() >= min(grace_until, quiet_since + self.collective_timeout + GRACE_S):
                by_name = {m["name"]: m for m in members}
                hung = self._probe([by_name[n] for n in pending])
                for name in list(pending):
                    if name in hung or grace_until != float("inf"):
                        pending.pop(name).cancel()
                        errors[name] = hung.get(name) or FtrlTimeoutError(f"{name} did not return")
                quiet_since = time.monotonic()
        return results

    def _probe(self, members: list[dict[str, Any]]) -> dict[str, BaseException]:
        """Ping members (PROBE_TIMEOUT_S); evict the ones that do not answer. Returns them."""
        futs, hung = self._submit(members, "ping", timeout=PROBE_TIMEOUT_S)
        self.gather(futs, hung, wait_s=PROBE_TIMEOUT_S + 1)
        if hung:
            log.warning("learner mesh %s: evicting unresponsive %s", self.group, sorted(hung))
            self.num_learners_evicted += len(hung)
            try:
                epoch = self.client.get_mesh(self.group)["epoch"]
                self.client.form_mesh(self.group, epoch, 1, remove=sorted(hung),
                                      reason=f"unresponsive: {', '.join(sorted(hung))}")
            except FtrlError as e:
                log.warning("evicting %s failed: %s", sorted(hung), e)
        return hung

    def _enter(self, view: dict[str, Any]) -> bool:
        """Every member enters `view`'s epoch and takes the committed state from a source."""
        epoch, members = view["epoch"], view["members"]
        self._spent.add(epoch)  # whatever happens, this epoch's keys are used from now on
        t0 = time.monotonic()
        states, errors = self._call_all(members, "mesh_state", timeout=PROBE_TIMEOUT_S)
        if errors:
            log.info("learner mesh %s epoch %d: members failed before entering: %s", self.group, epoch,
                     {n: _remote_kind(e) for n, e in errors.items()})
            self._note_failures(errors)
            return False
        first_state = states[members[0]["name"]]
        self.backend, self.device = first_state.get("backend", ""), first_state.get("device", "")
        source = next((i for i, m in enumerate(members) if self.version in states[m["name"]]["versions"]), None)
        if source is None and self.restore_state is None and self.fallback_state is not None:
            self._take_fallback()
        restored = source is None or self.restore_state is not None or self._restore_weights
        if restored:
            source = 0
            if self.restore_state is None and self.latest_weights is None:
                raise LearnerGroupError(f"no learner holds version {self.version} and there is no state to restore")
            first = self._handle(members[0]).options(timeout=self.call_timeout)
            try:
                if self.restore_state is not None:
                    log.warning("learner mesh %s: loading the checkpointed learner state (version %d) into %s",
                                self.group, self.version, members[0]["name"])
                    first.call("set_state", self.restore_state, self.version)
                else:
                    log.warning("learner mesh %s: no member holds version %d (all learners were lost): "
                                "continuing from the last published weights with fresh optimizer state",
                                self.group, self.version)
                    first.call("set_weights", self.version, self.latest_weights[1])
            except FtrlError as e:
                log.info("learner mesh %s epoch %d: loading the state into %s failed: %s", self.group, epoch,
                         members[0]["name"], e)
                self._note_failures({members[0]["name"]: e})
                return False
        # survivors holding the committed version are bit-identical: only joiners (or a
        # restored state) need the broadcast
        sync = restored or not all(self.version in states[m["name"]]["versions"] for m in members)
        _, errors = self._call_all(members, "enter_epoch", view, self.version, source, sync,
                                   timeout=self.collective_timeout * 3 + 30)
        if errors:
            log.info("learner mesh %s: entering epoch %d failed: %s", self.group, epoch,
                     {n: f"{_remote_kind(e)}: {str(e)[:120]}" for n, e in errors.items()})
            self._note_failures(errors)
            return False
        self._spent.discard(epoch)
        self.entered_epoch = epoch
        self.view = view
        self.restore_state = None
        self.fallback_state = None
        self._restore_weights = False
        self._entered_any = True
        self.num_reformations += 1
        self.last_reform_s = time.monotonic() - t0
        log.info("learner mesh %s: epoch %d entered by %d members in %.3fs (%s, version %d)",
                 self.group, epoch, len(members), self.last_reform_s,
                 f"state from rank {source}" if sync else "no state sync needed", self.version)
        return True

    def _note_failures(self, errors: dict[str, BaseException]) -> None:
        """Count the learners whose call failed by their own fault (died, unreachable,
        hung, raised; not a peer's failure seen from a survivor); raise on user-code
        failures of one learner too many times in a row."""
        own_failures = {n: e for n, e in errors.items() if _own_failure(e)}
        self.num_learner_failures += len(own_failures)
        self._failed.update(own_failures)
        own = {n: e for n, e in own_failures.items() if isinstance(e, ActorError)}  # its code raised
        if not own:
            return
        self._consecutive_failures += 1
        if self._consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
            name, error = next(iter(own.items()))
            raise LearnerGroupError(
                f"learner {name} failed {self._consecutive_failures} times in a row: {error}") from error

    # ------------------------------------------------------------------ learner interface

    def update(self, fragments: list[dict[str, np.ndarray]], env_steps_sampled: int = 0) -> dict[str, Any]:
        """One data-parallel update over the live members; retried whole until it commits."""
        t0 = time.monotonic()
        retries = 0
        while True:
            view = self._ready_view()
            members = view["members"]
            shards, options = self.learner_cls.split_update(self.config, fragments, len(members))
            if self.hyperparams:
                options = {**options, "hyperparams": dict(self.hyperparams)}
            args = {m["name"]: (view["epoch"], self.version, shard, options, env_steps_sampled)
                    for m, shard in zip(members, shards, strict=True)}
            results, errors = self._call_all(members, "update", args_for=args)
            if not errors:
                break
            retries += 1
            self.num_update_retries += 1
            log.warning("learner mesh %s: update of version %d failed in epoch %d (%s); retrying it whole",
                        self.group, self.version, view["epoch"],
                        ", ".join(f"{n}: {_remote_kind(e)}" for n, e in sorted(errors.items())))
            self._note_failures(errors)
            if retries >= MAX_UPDATE_ATTEMPTS:
                raise LearnerGroupError(
                    f"update of version {self.version} failed {retries} times in a row (last: "
                    + ", ".join(f"{n}: {e}" for n, e in sorted(errors.items())) + ")")
            self._after_failed_step(view, errors)
        self._consecutive_failures = 0
        self.version += 1
        self.last_update_members = len(members)
        out = self.learner_cls.merge_stats(list(results.values()))
        out.update({"num_learners": len(members), "mesh_epoch": view["epoch"], "update_retries": retries,
                    "weights_version": self.version, "update_s": time.monotonic() - t0})
        return out

    def _after_failed_step(self, view: dict[str, Any], errors: dict[str, BaseException]) -> None:
        """The epoch that failed a step is not used again: a member's death makes the
        coordinator open the next one (wait briefly for it); otherwise the next step
        re-forms with the same members."""
        died = any(isinstance(e, (ActorDiedError, ActorUnavailableError, StaleIncarnationError))
                   for e in errors.values())
        deadline = time.monotonic() + (3.0 if died else 0.0)
        try:
            now = self.client.get_mesh(self.group)
            while now["epoch"] == view["epoch"] and time.monotonic() < deadline:
                now = self.client.get_mesh(self.group, after_seq=now["seq"],
                                           wait_s=max(0.05, deadline - time.monotonic()))
        except (ActorUnavailableError, FtrlTimeoutError):
            self._spent.add(view["epoch"])  # re-form once the coordinator is back
            return
        if now["epoch"] == view["epoch"]:
            self._spent.add(view["epoch"])

    def _from_any_member(self, method: str, *args: Any) -> Any:
        """Call a read-only method on rank 0, falling back to the other members."""
        last: BaseException | None = None
        for m in self.view.get("members", []):
            try:
                return self._handle(m).options(timeout=self.call_timeout).call(method, *args)
            except FtrlError as e:
                last = e
        raise LearnerGroupError(f"no learner answered {method}: {last}")

    def get_weights(self) -> tuple[int, np.ndarray]:
        if self.latest_weights is not None and self.latest_weights[0] == self.version:
            return self.latest_weights
        if not self.view.get("members"):
            self._ready_view()
        version, weights = self._from_any_member("get_weights")
        self.latest_weights = (int(version), weights)
        return self.latest_weights

    def get_state(self) -> dict[str, Any]:
        """The learner state of one rank (all ranks are identical)."""
        if self.restore_state is not None:
            return self.restore_state
        return self._from_any_member("get_state")

    def state_at(self, version: int) -> dict[str, Any] | None:
        """The learner state of weights version `version` from a member, or None when the
        members moved on (the next iteration's state brings a newer one). Any thread: the
        state writer calls it while the driver samples (learners idle, in PPO)."""
        if self.restore_state is not None and int(self.restore_state.get("version", -1)) == version:
            return self.restore_state
        try:
            return self._from_any_member("get_state", version)
        except FtrlError as e:
            log.debug("learner state of version %d not available: %s", version, e)
            return None

    def resume_at(self, version: int, fallback: dict[str, Any] | None) -> None:
        """A resumed driver: continue at weights version `version`, from the live members
        that hold it (re-attached, nothing is loaded), else from `fallback` (a learner
        state, possibly of an older version), else from nothing (an error at the first
        step, as a run that lost every learner and has no state)."""
        self.version = int(version)
        self.fallback_state = fallback
        self.restore_state = None
        self.latest_weights = None
        self._restore_weights = False
        self._leave_epoch()

    def _take_fallback(self) -> None:
        """No member holds the version to continue at: load the fallback state."""
        state = self.fallback_state
        assert state is not None
        self.fallback_state = None
        version = int(state["version"])
        if version != self.version:
            log.warning("learner mesh %s: no learner holds version %d and no saved state has it: continuing "
                        "from the saved learner state of version %d", self.group, self.version, version)
        self.restore_state = state
        self.version = version

    def set_state(self, state: dict[str, Any], weights: np.ndarray | None = None) -> None:
        """Load a checkpointed state: the next epoch's source takes it. `weights`: its
        flat weights, which `get_weights` answers until then without asking a member
        (the members hold the old ones until the next step re-forms the mesh)."""
        self.restore_state = state
        self.version = int(state["version"])
        self.latest_weights = (self.version, np.asarray(weights, np.float32)) if weights is not None else None
        self._leave_epoch()

    def set_hyperparams(self, values: dict[str, Any]) -> None:
        """Live training keys from the next update on: they ride along with every update's
        options (ftrl.rl.learning.learner_actor), so joiners and restarted members get them
        too. The mesh's config hash stays the job's: learners are created with its config."""
        self.hyperparams = {**self.hyperparams, **values}

    def set_weights(self, version: int, weights: np.ndarray) -> None:
        """Load weights (fresh optimizer state): the next epoch's source takes them."""
        self.latest_weights = (int(version), np.asarray(weights, np.float32))
        self.version = int(version)
        self.restore_state = None
        self._restore_weights = True
        self._leave_epoch()

    def _leave_epoch(self) -> None:
        """The next step re-forms: its source loads what was just set."""
        if self.entered_epoch:
            self._spent.add(self.entered_epoch)
            self.entered_epoch = 0

    def digests(self) -> dict[str, str]:
        """{member: sha256 of its state} for the current epoch (bit-identity checks)."""
        return self._call_all(self.view.get("members", []), "digest", timeout=30.0)[0]

    #: counter attribute -> its key in results (stats) and metrics rows
    _COUNTERS = {
        "num_reformations": "num_learner_reformations",
        "num_update_retries": "num_learner_update_retries",
        "num_learners_evicted": "num_learners_evicted",
        "num_learner_restarts": "num_learner_restarts",
        "num_learner_failures": "num_learner_failures",
    }

    def get_counters(self) -> dict[str, int]:
        """The cumulative counters (a driver state holds them)."""
        return {attr: int(getattr(self, attr)) for attr in self._COUNTERS}

    def set_counters(self, counters: dict[str, Any]) -> None:
        """Continue from saved counters (added to what happened since this group began)."""
        for attr in self._COUNTERS:
            if isinstance(counters.get(attr), int):
                setattr(self, attr, getattr(self, attr) + int(counters[attr]))

    @classmethod
    def counters_from_row(cls, row: dict[str, Any]) -> dict[str, int]:
        """The counters a metrics row shows, in `get_counters` form."""
        return {attr: int(row[key]) for attr, key in cls._COUNTERS.items() if isinstance(row.get(key), int)}

    def known_incarnations(self) -> list[dict[str, Any]]:
        """The incarnation of each learner as last seen, with the runtime's restart count
        then (a driver state holds them; `remember_previous` takes them back)."""
        return [{"name": name, "incarnation": inc, "restarts": restarts}
                for name, (inc, restarts) in sorted(self._incarnations.items())]

    def remember_previous(self, previous: list[dict[str, Any]]) -> None:
        """What a previous driver knew of the learners (`known_incarnations`): a learner
        re-attached under another incarnation counts as restarted and failed."""
        self._previous = {str(p["name"]): (int(p.get("incarnation", 0)), int(p.get("restarts", 0)))
                          for p in previous if isinstance(p, dict) and "name" in p}
        for slot in self.slots:  # already created (re-attached) before this was known
            if slot.handle is not None and slot.name not in self._creating:
                self._incarnations.pop(slot.name, None)
                self._adopt_created(slot.name)

    def stats(self) -> dict[str, Any]:
        return {
            "num_learners": self.last_update_members,
            "mesh_epoch": self.entered_epoch,
            "num_learner_reformations": self.num_reformations,
            "num_learner_update_retries": self.num_update_retries,
            "num_learners_evicted": self.num_learners_evicted,
            "num_learner_restarts": self.num_learner_restarts,
            "num_learner_failures": self.num_learner_failures,
            "learner_reform_s": self.last_reform_s,
            "learner_backend": self.backend,
            "learner_device": self.device,
        }

    def stop(self, kill: bool = True) -> None:
        """Stop background work; with `kill`, also kill every learner of the group."""
        super().stop(kill, reason="job ended")
