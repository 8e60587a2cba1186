"""The cluster-state layer: every record change goes through it to the store.

Records live in memory (the controller's dicts); methods marked `@durable` end by
writing every record they changed in one transaction (`flush`), before the caller
is answered. At start-up `_restore` loads an earlier coordinator's records.
"""

from __future__ import annotations

import functools
import logging
import time

from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.store import Batch
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    NotFoundError,
    StaleIncarnationError,
)

log = logging.getLogger("ftrl.coordinator.controller")
E = pb.EventType
_DEDUP_KEYS = 100_000


def durable(method):
    """Write every record the call changed in one transaction before it returns (and so
    before the caller is answered), also when it raised after changing something."""

    @functools.wraps(method)
    def wrapper(self: ClusterState, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            self.flush()

    return wrapper


class ClusterState:
    """Records, events and their durable store (a part of Controller)."""

    def _restore(self) -> bool:
        """Load the records of an earlier coordinator on this state dir. Nodes wait up
        to the grace period to register again with what they run; nothing is placed
        until then, so an actor still running is adopted, not started twice."""
        loaded = self.store.load()
        if not any(loaded.tables.values()):
            return False
        now = self.clock()
        grace = self.config.restart_grace_s
        if grace is None:
            grace = max(10.0, 2 * self.config.heartbeat_timeout_s)
        meta = {k: int.from_bytes(v, "big") for k, v in loaded.meta.items()}
        self._saved_meta = dict(meta)
        self._last_epoch = meta.get("last_epoch", 0)
        self.events.seq = meta.get("event_seq", 0)
        for name, row in loaded.tables["actors"].items():
            rec = ActorRecord.from_row(row)
            self.actors[name] = rec
        for node_id, row in loaded.tables["nodes"].items():
            # a restored node counts as heard from at the end of the grace minus the
            # timeout: it is declared LOST only if it has not come back by then
            node = NodeRecord.from_row(node_id, row, now + grace - self.config.heartbeat_timeout_s)
            self.nodes[node_id] = node
            if node.state != NodeState.LOST:
                self._by_heartbeat[node_id] = None
        for rec in self.actors.values():
            node = self.nodes.get(rec.node_id)
            if rec.state == ActorState.DEAD:
                continue
            if node is not None and node.state != NodeState.LOST:
                node.reserve(rec.name, rec.resources)
            if rec.state in (ActorState.PENDING, ActorState.RESTARTING):
                self._waiting.add(rec.name)
            elif rec.state == ActorState.STARTING and (node is None or node.state == NodeState.LOST):
                rec.node_id = ""
                rec.set_state(ActorState.PENDING)
                self._waiting.add(rec.name)
        self._grace_until = now + grace
        self._awaited = {n.node_id for n in self.nodes.values() if n.state != NodeState.LOST}
        if not self._awaited:
            self._grace_until = now  # no node to wait for
        self._wake_at = self._grace_until
        self.jobs.restore(loaded.tables["jobs"])
        log.info("restored %d nodes, %d actors and %d jobs from the state store; waiting up to "
                 "%.1fs for workers to re-register", len(self.nodes), len(self.actors),
                 len(self.jobs.jobs), self._grace_until - now)
        return True

    def flush(self) -> None:
        """Commit every changed record in one transaction."""
        batch = Batch()
        for name in self._dirty_actors:
            rec = self.actors.get(name)
            batch.put("actors", name, rec.to_row() if rec is not None else None)
        for node_id in self._dirty_nodes:
            node = self.nodes.get(node_id)
            batch.put("nodes", node_id, node.to_row() if node is not None else None)
        self.jobs.collect(batch)
        meta = {"last_epoch": self._last_epoch, "event_seq": self.events.seq}
        for key, value in meta.items():
            if self._saved_meta.get(key) != value:
                batch.meta[key] = value.to_bytes(8, "big")
        if not batch:
            return
        self.store.commit(batch)
        self._saved_meta.update(meta)
        self._dirty_actors.clear()
        self._dirty_nodes.clear()

    def _next_epoch(self) -> int:
        """The next node registration epoch. With durable state the stored counter keeps
        it growing across restarts; without, the wall clock (ms) is the floor."""
        # The first epoch of a cluster starts at the wall clock (ms) so that epochs of
        # different clusters (and a guess such as 1) do not collide; from then on only
        # the counter orders them.
        floor = int(time.time() * 1000) if not self.store.durable or self._last_epoch == 0 else 0
        self._last_epoch = max(self._last_epoch + 1, floor)
        return self._last_epoch

    def _changed(self, rec: ActorRecord) -> None:
        self._dirty_actors.add(rec.name)
        self.meshes.actor_changed(rec.name)
        self.jobs.actor_changed(rec)
        self.on_actor_change(rec.name)

    def _emit(self, type_: int, rec: ActorRecord | None = None, node_id: str = "", message: str = ""):
        if rec is not None:
            self.events.emit(type_, rec.name, rec.node_id, rec.incarnation, message)
            if type_ in (E.EVENT_DIED, E.EVENT_DEAD):
                self.meshes.actor_died(rec.name, rec.incarnation, message)
            self._changed(rec)
        else:
            self._dirty_nodes.add(node_id)
            self.events.emit(type_, node_id=node_id, message=message)

    def _dedup(self, name: str, incarnation: int, kind: int) -> bool:
        """True if this report was seen before (and so must be ignored)."""
        key = (name, incarnation, kind)
        if key in self._seen:
            return True
        self._seen[key] = None
        while len(self._seen) > _DEDUP_KEYS:
            self._seen.popitem(last=False)
        return False

    def node(self, node_id: str, epoch: int) -> NodeRecord:
        """The node of a live registration; a stale epoch is refused (fencing)."""
        node = self.nodes.get(node_id)
        if node is None:
            raise NotFoundError(f"node {node_id!r} is not registered; register first")
        if node.epoch != epoch:
            raise StaleIncarnationError(
                f"node {node_id!r} epoch {epoch} is stale (current {node.epoch}); register again"
            )
        if node.state == NodeState.LOST:
            raise StaleIncarnationError(f"node {node_id!r} was declared lost; register again")
        return node
