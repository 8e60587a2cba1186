"""`JOB/learner/I`: one member of an elastic learner mesh ("ftrl.rl.learning.learner_actor:LearnerActor").

It owns the algorithm's learner (a `Learner`, by class path) and an EpochMesh. Life of a member:

1. Construction is the warm-up: torch import, model, its own TCPStore; then it joins
   the coordinator's mesh (`JoinMesh`) and waits there; the actor is ALIVE only then.
2. A watcher thread long-polls the mesh. When the coordinator opens a newer epoch
   (a member died), every collective of the old epoch is abandoned at once
   (`EpochMesh.abort_below`). When this member finds itself out of the mesh (it was
   fenced as hung and resumed, or the coordinator restarted), it joins again as a
   newcomer: it can never walk back into its old epoch, whose store prefix and peers
   are gone.
3. The driver calls `enter_epoch(view, version, source_rank)`: the member rolls back an
   update the mesh did not commit, builds the new group, and receives model, Adam
   state and counters from the source rank over the new group's own broadcast.
4. `update(epoch, version, shard, ...)`: one all-reduced PPO update on its shard. A
   failure (peer lost, epoch changed, timeout) restores the state from before the
   update, so an interrupted update is retried whole, never applied twice or half.
   The driver's live hyperparameters (an exploit of population-based training) come
   with every update's options and are applied before it, so every member, a joiner
   or a restarted one included, trains with the same ones.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import torch

from ftrl.rl.learning.mesh import EpochMesh, MeshChanged
from ftrl.rl.spaces import SpaceSpec
from ftrl.util.imports import import_class
from ftrl.wire.errors import ConfigError, FtrlError, InvalidArgumentError, PermissionDeniedError

log = logging.getLogger(__name__)

WATCH_WAIT_S = 20.0
LOCK_TIMEOUT_S = 120.0


class LearnerActor:
    """One rank of the learner mesh; see the module docstring.

    Args:
        config: the algorithm config as a dict.
        space_spec: SpaceSpec.to_dict() of the env.
        group: the mesh (default: this actor's name without "/I").
        config_hash: what the mesh checks on join (default: from config and spaces).
        learner_class: "module:Class" of the algorithm's learner (a
            ftrl.rl.learning.learner.Learner), e.g. "ftrl.rl.algorithms.ppo:PPOLearner".
        client, name, incarnation, host: only outside an actor (tests).
    """

    def __init__(self, config: dict, space_spec: dict, group: str | None = None,
                 config_hash: str | None = None, client: Any = None, name: str | None = None,
                 incarnation: int | None = None, host: str | None = None,
                 learner_class: str = ""):
        from ftrl.client.context import get_runtime_context
        from ftrl.config.registry import config_from_dict

        ctx = get_runtime_context()
        self.name = name or (ctx.name if ctx is not None else "learner/0")
        self.incarnation = incarnation if incarnation is not None else (ctx.incarnation if ctx else 1)
        self.group = group or self.name.rsplit("/", 1)[0]
        self.client = client if client is not None else ctx.client()
        cfg = config_from_dict(config)
        lrn = cfg.learners_cfg
        torch.set_num_threads(max(1, int(lrn.num_cpus_per_learner)))
        use_cuda = lrn.num_gpus_per_learner > 0 and torch.cuda.is_available()
        device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
        if not learner_class:
            raise ConfigError("a learner actor needs learner_class, the algorithm's learner ('module:Class')")
        learner_cls = import_class(learner_class)
        self.learner = learner_cls(cfg, SpaceSpec.from_dict(space_spec), device=device)
        self.mesh = EpochMesh(host or (ctx.host if ctx is not None else "127.0.0.1"),
                              lrn.learner_collective_timeout_s, device)
        self.learner.allreduce = self.mesh.allreduce_
        self.config_hash = config_hash or learner_cls.mesh_config_hash(config, space_spec)
        self._lock = threading.Lock()
        # (version, state) to roll back to; one attribute, so a reader never sees a
        # version without its state
        self._snapshot: tuple[int, dict[str, Any]] | None = None
        self._stop = threading.Event()
        self._seen_epoch = 0
        view = self._join()  # raises on a refused join: the actor fails to start, clearly
        self._seen_epoch = int(view["epoch"])
        self._watcher = threading.Thread(target=self._watch, args=(int(view["seq"]),),
                                         name="ftrl-mesh-watch", daemon=True)
        self._watcher.start()

    # ------------------------------------------------------------------ membership

    def _join(self) -> dict[str, Any]:
        return self.client.join_mesh(
            self.group, self.name, self.incarnation, self.mesh.store_address, self.mesh.host,
            self.config_hash, last_epoch=max(self._seen_epoch, self.mesh.epoch))

    def _watch(self, seq: int) -> None:
        """Abandon old epochs the moment the coordinator opens a newer one; join again
        when out of the mesh. Runs until shutdown."""
        backoff = 0.2
        while not self._stop.is_set():
            try:
                view = self.client.get_mesh(self.group, after_seq=seq, wait_s=WATCH_WAIT_S)
                backoff = 0.2
            except FtrlError as e:
                log.debug("mesh watch: %s", e)
                self._stop.wait(backoff)
                backoff = min(2.0, backoff * 2)
                continue
            seq = int(view["seq"])
            epoch = int(view["epoch"])
            self._seen_epoch = max(self._seen_epoch, epoch)
            if epoch > self.mesh.epoch and self.mesh.epoch > 0:
                self.mesh.abort_below(epoch)
            names = {m["name"] for m in view["members"]} | {m["name"] for m in view["waiting"]}
            if self.name not in names:
                try:
                    view = self._join()
                    seq = int(view["seq"])
                    log.warning("%s was out of mesh %s (epoch %d): joined again", self.name, self.group, epoch)
                except PermissionDeniedError as e:
                    log.error("%s is fenced; not joining again: %s", self.name, e)
                    return
                except InvalidArgumentError as e:
                    log.error("%s cannot join %s: %s", self.name, self.group, e)
                    return
                except FtrlError as e:
                    log.warning("joining %s again failed: %s", self.group, e)
                    self._stop.wait(backoff)

    # ------------------------------------------------------------------ driver API

    def ping(self) -> dict[str, Any]:
        return {"ok": True, **self.mesh_state()}

    def mesh_state(self) -> dict[str, Any]:
        """Epoch, rank and the versions this member could serve as a source from."""
        versions = [self.learner.version]
        snapshot = self._snapshot
        if snapshot is not None:
            versions.append(snapshot[0])
        return {"name": self.name, "incarnation": self.incarnation, "epoch": self.mesh.epoch,
                "rank": self.mesh.rank, "world_size": self.mesh.world_size,
                "version": self.learner.version, "versions": versions,
                "backend": self.mesh.backend, "device": str(self.mesh.device),
                "store_address": self.mesh.store_address,
                "busy": self._lock.locked()}

    def _acquire(self) -> None:
        if not self._lock.acquire(timeout=LOCK_TIMEOUT_S):
            raise TimeoutError(f"{self.name} is busy (an update did not end in {LOCK_TIMEOUT_S}s)")

    def enter_epoch(self, view: dict[str, Any], version: int, source_rank: int,
                    sync: bool = True) -> dict[str, Any]:
        """Build the group of `view["epoch"]` and take the trained state (at `version`)
        from `source_rank` over it. Every member of the view calls this at once. With
        `sync=False` (every member holds `version`: survivors are bit-identical by
        construction) each member only rolls back what was not committed."""
        epoch = int(view["epoch"])
        self.mesh.abort_below(epoch)  # wakes an update of an older epoch still waiting
        self._acquire()
        try:
            members = view["members"]
            ranks = [i for i, m in enumerate(members)
                     if m["name"] == self.name and int(m["incarnation"]) == self.incarnation]
            if not ranks:
                raise MeshChanged(f"{self.name}@{self.incarnation} is not a member of epoch {epoch}")
            rank = ranks[0]
            if rank == source_rank or not sync:
                self._roll_back_to(version)
            t0 = time.monotonic()
            form_s = self.mesh.enter(epoch, rank, len(members), members[0]["store_address"],
                                     view["store_prefix"])
            t1 = time.monotonic()
            if sync:
                for tensor in self.learner.state_tensors():
                    self.mesh.broadcast_(tensor, source_rank)
                counters = self.learner.counters_tensor()
                self.mesh.broadcast_(counters, source_rank)
                self.learner.set_counters(counters)
            self._snapshot = None
            if self.learner.version != version:
                raise MeshChanged(f"source rank {source_rank} had version {self.learner.version}, "
                                  f"expected {version}")
            return {"rank": rank, "epoch": epoch, "version": self.learner.version,
                    "form_s": form_s, "sync_s": time.monotonic() - t1, "enter_s": time.monotonic() - t0}
        finally:
            self._lock.release()

    def _roll_back_to(self, version: int) -> None:
        if self.learner.version == version:
            return
        if self._snapshot is not None and self._snapshot[0] == version:
            self.learner.restore(self._snapshot[1])
            self._snapshot = None
            return
        raise MeshChanged(f"{self.name} holds version {self.learner.version}, cannot serve {version}")

    def update(self, epoch: int, version: int, fragments: list[dict[str, np.ndarray]],
               options: dict[str, Any], env_steps_sampled: int = 0) -> dict[str, Any]:
        """One all-reduced update of `version` on this member's shard (undone on failure);
        `options` are what the learner class's `split_update` gave every member, plus the
        driver's live hyperparameters ("hyperparams", applied first: a joiner gets them too)."""
        self._acquire()
        try:
            if self.mesh.epoch != epoch:
                raise MeshChanged(f"{self.name} is in epoch {self.mesh.epoch}, not {epoch}")
            self._roll_back_to(version)
            options = dict(options)
            hyperparams = options.pop("hyperparams", None)
            if hyperparams:  # the driver's live overrides ride along with every update
                self.learner.set_hyperparams(hyperparams)
            snap = self.learner.snapshot()
            # published before the update moves the version on: `version` stays servable
            self._snapshot = (version, snap)
            try:
                out = self.learner.update(fragments, env_steps_sampled, **options)
            except BaseException:
                self.learner.restore(snap)
                raise
            out["rank"] = self.mesh.rank
            return out
        finally:
            self._lock.release()

    def get_weights(self) -> tuple[int, np.ndarray]:
        return self.learner.get_weights()

    def get_state(self, version: int | None = None) -> dict[str, Any]:
        """The learner state (a checkpoint's); with `version`, only if it is that weights
        version (MeshChanged otherwise: the learner moved on)."""
        self._acquire()
        try:
            if version is not None and self.learner.version != version:
                raise MeshChanged(f"{self.name} holds version {self.learner.version}, not {version}")
            return self.learner.get_state()
        finally:
            self._lock.release()

    def set_state(self, state: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        """Load a checkpointed learner state (optionally renumbered to `version`)."""
        self._acquire()
        try:
            self.learner.set_state(state)
            if version is not None:
                self.learner.version = int(version)
            self._snapshot = None
            return {"version": self.learner.version}
        finally:
            self._lock.release()

    def set_weights(self, version: int, weights: np.ndarray) -> dict[str, Any]:
        """Load weights (fresh optimizer moments): the restart of a mesh that lost
        every member before its first checkpoint."""
        self._acquire()
        try:
            self.learner.set_weights(version, weights)
            self.learner.reset_optimizer()
            self._snapshot = None
            return {"version": self.learner.version}
        finally:
            self._lock.release()

    def digest(self) -> str:
        """sha256 of parameters, Adam moments and counters (for bit-identity checks)."""
        self._acquire()
        try:
            return self.learner.digest()
        finally:
            self._lock.release()

    def __ftrl_shutdown__(self) -> None:
        self._stop.set()
        self.mesh.close()
