"""LearnerGroup: the driver's side of the elastic learner mesh.

It has the interface of an in-process learner (`update`, `get_weights`, `get_state`,
`set_state`, `version`), so the Algorithm does not care where learning happens.

- `num_learners` actors `JOB/learner/I` ("ftrl.rl.learning.learner_actor:LearnerActor") are
  created with `max_num_learner_restarts` (an `ActorGroup`, `rl.actor_group`: names,
  creation, strict handles, parallel calls, teardown); the runtime restarts a dead one
  in place and the new incarnation joins the mesh again after its warm-up. A learner
  whose start failed is created again after a pause (`LearnerStarts`,
  rl/learning/learner_starts.py).
- At each step boundary (`update`), the group reads the mesh from the coordinator and
  enters a new epoch when it changed (`LearnerMesh`, rl/learning/learner_mesh.py:
  membership, joiners, the state broadcast, hung members); planned removals (`scale`)
  leave. Below `min_learners` training pauses for up to `learner_wait_timeout_s`.
- The train batch is split into one shard per member, as the algorithm's learner class
  says (`Learner.split_update`: its shards and the options every member gets, with the
  live hyperparameters the driver set, `set_hyperparams`); the update
  commits only when every member returned; otherwise it is retried whole in the next
  epoch (members roll back what they applied), at most MAX_UPDATE_ATTEMPTS times.
- Restarts, failures, evictions, re-formations and retries are counted, and resumed
  drivers reconcile the learners' incarnations, in `LearnerHealth`
  (rl/learning/learner_health.py).

The group owns the committed state (`CommittedState`: the weights version, and what
the next epoch loads when no member holds it) and hands it to the mesh at each step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.rl.actor_group import ActorGroup, ActorSlot
from ftrl.rl.learning.learner_health import (
    MAX_CONSECUTIVE_FAILURES,
    LearnerGroupError,
    LearnerHealth,
    LearnerWaitTimeout,
    NoLearnerAnswered,
    remote_kind,
)
from ftrl.rl.learning.learner_mesh import (
    LEARNER_START_TIMEOUT_S,
    MAX_UPDATE_ATTEMPTS,
    CommittedState,
    LearnerMesh,
)
from ftrl.rl.learning.learner_starts import MAX_START_FAILURES, LearnerStarts
from ftrl.rl.models.check import check_model
from ftrl.rl.spaces import SpaceSpec
from ftrl.util.imports import import_class
from ftrl.wire.errors import FtrlError

__all__ = ["LEARNER_CLASS", "LEARNER_START_TIMEOUT_S", "MAX_CONSECUTIVE_FAILURES", "MAX_START_FAILURES",
           "MAX_UPDATE_ATTEMPTS", "ActorSlot", "CommittedState", "LearnerGroup", "LearnerGroupError",
           "LearnerWaitTimeout"]

log = logging.getLogger(__name__)

LEARNER_CLASS = "ftrl.rl.learning.learner_actor:LearnerActor"


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
        super().__init__(
            client, group=f"{job_name}/learner", actor_class=LEARNER_CLASS, actor_kwargs=kwargs,
            max_restarts=lrn.max_num_learner_restarts, resources=config.learner_resources(),
            create_options={"max_concurrency": 4, "timeout": 300.0,
                            "placement_strategy": config.resources_cfg.placement_strategy},
            pool_size=max(4, 2 * self.target), pool_name="learner-group")
        self.slots = [ActorSlot(index=i, name=self.actor_name(i)) for i in range(self.target)]
        self._lock = threading.Lock()  # guards `target` (scale is called from other threads)
        # one thread at a time re-forms the mesh: the learner thread's update and a read
        # from the driver's thread that found no member may both want a new epoch
        self._reform_lock = threading.RLock()
        self.committed = CommittedState()
        self.health = LearnerHealth(self.group, actor_info=lambda name: self.client.actor(name))
        self.starts = LearnerStarts(self.group, create_all=self.create_all, on_started=self._adopt_created)
        self.mesh = LearnerMesh(
            client, self.group, pinned=self.pinned, health=self.health, n_init=self.n_init,
            min_learners=self.min_learners, wait_timeout_s=self.wait_timeout,
            collective_timeout_s=self.collective_timeout, call_timeout_s=self.call_timeout,
            poll_starts=lambda: self.starts.poll(self.slots), apply_scale=self._apply_scale)
        self.last_update_members = 0

    # ------------------------------------------------------------------ actors

    def start(self) -> None:
        """Create the learners (in the background; `update` waits for n_init of them).
        Learners of a previous driver that are still up are re-attached; the epoch they
        are in was entered by that driver, so it is spent for this one."""
        self.mesh.attach()
        self.starts.begin(self.slots)

    def _adopt_created(self, name: str) -> None:
        """A learner was created or re-attached: follow its incarnation (a restart when a
        previous driver knew another one, `remember_previous`)."""
        slot = next((s for s in self.slots if s.name == name), None)
        if slot is None or slot.handle is None:
            return
        self.health.adopt(name, slot.incarnation, slot.runtime_restarts)

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
            self.starts.begin(added)
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
                self.starts.cancel(name)
                try:
                    self.kill(name, reason="learner group scaled down")
                except FtrlError as e:
                    log.warning("kill_actor(%s): %s", name, e)
        return view

    # ------------------------------------------------------------------ learner interface

    @property
    def version(self) -> int:
        """The committed weights version."""
        return self.committed.version

    @property
    def entered_epoch(self) -> int:
        """The mesh epoch this group entered last (0: none, or it left it)."""
        return self.mesh.entered_epoch

    def update(self, fragments: list[dict[str, np.ndarray]], env_steps_sampled: int = 0) -> dict[str, Any]:
        """One data-parallel update over the live members; retried whole until it commits."""
        t0 = time.monotonic()
        retries = 0
        while True:
            with self._reform_lock:
                view = self.mesh.ready_view(self.committed)
            members = view["members"]
            shards, options = self.learner_cls.split_update(self.config, fragments, len(members))
            if self.hyperparams:
                options = {**options, "hyperparams": dict(self.hyperparams)}
            args = {m["name"]: (view["epoch"], self.committed.version, shard, options, env_steps_sampled)
                    for m, shard in zip(members, shards, strict=True)}
            results, errors = self.mesh.call_all(members, "update", args_for=args)
            if not errors:
                break
            retries += 1
            self.health.num_update_retries += 1
            log.warning("learner mesh %s: update of version %d failed in epoch %d (%s); retrying it whole",
                        self.group, self.committed.version, view["epoch"],
                        ", ".join(f"{n}: {remote_kind(e)}" for n, e in sorted(errors.items())))
            self.health.note_failures(errors)
            if retries >= MAX_UPDATE_ATTEMPTS:
                raise LearnerGroupError(
                    f"update of version {self.committed.version} failed {retries} times in a row (last: "
                    + ", ".join(f"{n}: {e}" for n, e in sorted(errors.items())) + ")")
            with self._reform_lock:
                self.mesh.after_failed_step(view, errors)
        self.health.step_committed()
        self.committed.version += 1
        self.last_update_members = len(members)
        out = self.learner_cls.merge_stats(list(results.values()))
        out.update({"num_learners": len(members), "mesh_epoch": view["epoch"], "update_retries": retries,
                    "weights_version": self.committed.version, "update_s": time.monotonic() - t0})
        return out

    def get_weights(self) -> tuple[int, np.ndarray]:
        committed = self.committed
        if committed.latest_weights is not None and committed.latest_weights[0] == committed.version:
            return committed.latest_weights
        version, weights = self._read("get_weights")
        committed.latest_weights = (int(version), weights)
        return committed.latest_weights

    def get_state(self) -> dict[str, Any]:
        """The learner state of one rank (all ranks are identical)."""
        if self.committed.restore_state is not None:
            return self.committed.restore_state
        return self._read("get_state")

    def _read(self, method: str) -> Any:
        """`method` from a member of the current epoch. When none answers (a learner died),
        the mesh re-forms as for a failed update, so the read waits for the restarted
        learners (up to learner_wait_timeout_s) instead of failing the job; at most
        MAX_UPDATE_ATTEMPTS tries."""
        for attempt in range(1, MAX_UPDATE_ATTEMPTS + 1):
            with self._reform_lock:
                if not self.mesh.view.get("members"):
                    self.mesh.ready_view(self.committed)
                view = self.mesh.view
            try:
                return self.mesh.from_any_member(method)
            except NoLearnerAnswered as e:
                if attempt == MAX_UPDATE_ATTEMPTS:
                    raise
                log.warning("learner mesh %s: %s; re-forming to read it again", self.group, e)
                self.health.note_failures(e.errors)
                with self._reform_lock:
                    self.mesh.after_failed_step(view, e.errors)
                    self.mesh.ready_view(self.committed)
        raise AssertionError("unreachable")

    def state_at(self, version: int) -> dict[str, Any] | None:
        """The learner state of weights version `version` from a member, or None when the
        members moved on (the next iteration's state brings a newer one). Any thread: the
        state writer calls it while the driver samples (learners idle, in PPO)."""
        restore = self.committed.restore_state
        if restore is not None and int(restore.get("version", -1)) == version:
            return restore
        try:
            return self.mesh.from_any_member("get_state", version)
        except FtrlError as e:
            log.debug("learner state of version %d not available: %s", version, e)
            return None

    def resume_at(self, version: int, fallback: dict[str, Any] | None) -> None:
        """A resumed driver: continue at weights version `version`, from the live members
        that hold it (re-attached, nothing is loaded), else from `fallback` (a learner
        state, possibly of an older version), else from nothing (an error at the first
        step, as a run that lost every learner and has no state)."""
        committed = self.committed
        committed.version = int(version)
        committed.fallback_state = fallback
        committed.restore_state = None
        committed.latest_weights = None
        committed.restore_weights = False
        self.mesh.leave_epoch()

    def set_state(self, state: dict[str, Any], weights: np.ndarray | None = None) -> None:
        """Load a checkpointed state: the next epoch's source takes it. `weights`: its
        flat weights, which `get_weights` answers until then without asking a member
        (the members hold the old ones until the next step re-forms the mesh)."""
        committed = self.committed
        committed.restore_state = state
        committed.version = int(state["version"])
        committed.latest_weights = (committed.version, np.asarray(weights, np.float32)) if weights is not None else None
        self.mesh.leave_epoch()

    def set_hyperparams(self, values: dict[str, Any]) -> None:
        """Live training keys from the next update on: they ride along with every update's
        options (ftrl.rl.learning.learner_actor), so joiners and restarted members get them
        too. The mesh's config hash stays the job's: learners are created with its config."""
        self.hyperparams = {**self.hyperparams, **values}

    def set_weights(self, version: int, weights: np.ndarray) -> None:
        """Load weights (fresh optimizer state): the next epoch's source takes them."""
        committed = self.committed
        committed.latest_weights = (int(version), np.asarray(weights, np.float32))
        committed.version = int(version)
        committed.restore_state = None
        committed.restore_weights = True
        self.mesh.leave_epoch()

    def digests(self) -> dict[str, str]:
        """{member: sha256 of its state} for the current epoch (bit-identity checks)."""
        return self.mesh.digests()

    # ------------------------------------------------------------------ counters (LearnerHealth)

    def get_counters(self) -> dict[str, int]:
        """The cumulative counters (a driver state holds them)."""
        return self.health.get_counters()

    def set_counters(self, counters: dict[str, Any]) -> None:
        """Continue from saved counters (added to what happened since this group began)."""
        self.health.set_counters(counters)

    @classmethod
    def counters_from_row(cls, row: dict[str, Any]) -> dict[str, int]:
        """The counters a metrics row shows, in `get_counters` form."""
        return LearnerHealth.counters_from_row(row)

    def known_incarnations(self) -> list[dict[str, Any]]:
        """The incarnation of each learner as last seen, with the runtime's restart count
        then (a driver state holds them; `remember_previous` takes them back)."""
        return self.health.known_incarnations()

    def remember_previous(self, previous: list[dict[str, Any]]) -> None:
        """What a previous driver knew of the learners (`known_incarnations`): a learner
        re-attached under another incarnation counts as restarted and failed."""
        attached = [(s.name, s.incarnation, s.runtime_restarts) for s in self.slots
                    if s.handle is not None and not self.starts.creating(s.name)]
        self.health.remember_previous(previous, attached)

    def stats(self) -> dict[str, Any]:
        return {
            "num_learners": self.last_update_members,
            "mesh_epoch": self.mesh.entered_epoch,
            **self.health.stats(),
            "learner_reform_s": self.mesh.last_reform_s,
            "learner_backend": self.mesh.backend,
            "learner_device": self.mesh.device,
        }

    def stop(self, kill: bool = True) -> None:
        """Stop background work; with `kill`, also kill every learner of the group."""
        super().stop(kill, reason="job ended")
