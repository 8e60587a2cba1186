"""The cluster state: node and actor records, the event log, and their durable store.

`ClusterState` owns the records and everything about writing them: which records
changed since the last write (`flush` writes them all in one transaction, which the
controller runs at the end of each call, before the caller is answered), the saved
counters (the node registration epoch, the event sequence), and loading an earlier
coordinator's records at start-up. Every change of an actor record goes through
`actor_event` or `actor_changed`, which also tell the watchers the controller wired in
(learner meshes, jobs, the server's waiters).

The records themselves are plain data (ftrl.coordinator.records) that the other parts
change in place; they tell this part which ones they changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ftrl.coordinator.events import EventLog
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.store import Batch, Loaded, MemoryStore, SQLiteStore
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import NotFoundError, StaleIncarnationError

E = pb.EventType
#: Watches actor records: `changed(record)` after any change, `died(record, message)`
#: when an incarnation died (EVENT_DIED or EVENT_DEAD, before `changed`).
ActorWatcher = Callable[[ActorRecord], None]
DeathWatcher = Callable[[ActorRecord, str], None]


class ClusterState:
    """Node and actor records, the event log, and their store (see the module docstring)."""

    def __init__(
        self,
        store: MemoryStore | SQLiteStore,
        changed: ActorWatcher = lambda rec: None,
        died: DeathWatcher = lambda rec, message: None,
    ) -> None:
        self.store = store
        self.nodes: dict[str, NodeRecord] = {}
        self.actors: dict[str, ActorRecord] = {}
        self.events = EventLog()
        self._changed = changed
        self._died = died
        self._dirty_actors: set[str] = set()
        self._dirty_nodes: set[str] = set()
        self._saved_meta: dict[str, int] = {}
        self._last_epoch = 0

    # ---------------------------------------------------------------- changes

    def actor_event(self, type_: int, rec: ActorRecord, message: str = "") -> None:
        """Log an event of `rec` (as it is now) and note the record changed."""
        self.events.emit(type_, rec.name, rec.node_id, rec.incarnation, message)
        if type_ in (E.EVENT_DIED, E.EVENT_DEAD):
            self._died(rec, message)
        self.actor_changed(rec)

    def node_event(self, type_: int, node_id: str, message: str = "") -> None:
        """Log an event of a node and note its record changed."""
        self._dirty_nodes.add(node_id)
        self.events.emit(type_, node_id=node_id, message=message)

    def actor_changed(self, rec: ActorRecord) -> None:
        """`rec` changed: write it with the next flush and tell the watchers."""
        self._dirty_actors.add(rec.name)
        self._changed(rec)

    def mark_actor(self, name: str) -> None:
        """Write the record of `name` (or its deletion) with the next flush."""
        self._dirty_actors.add(name)

    def mark_node(self, node_id: str) -> None:
        """Write the record of `node_id` (or its deletion) with the next flush."""
        self._dirty_nodes.add(node_id)

    def put_actor(self, rec: ActorRecord) -> None:
        """Add (or replace) an actor record; its event marks it changed."""
        self.actors[rec.name] = rec

    def put_node(self, node: NodeRecord) -> None:
        """Add (or replace) a node record."""
        self.nodes[node.node_id] = node
        self._dirty_nodes.add(node.node_id)

    def forget_node(self, node_id: str) -> None:
        del self.nodes[node_id]
        self._dirty_nodes.add(node_id)

    def forget_dead_actors(self) -> None:
        """Drop the records of every DEAD actor (room for new ones)."""
        for name in [n for n, r in self.actors.items() if r.state == ActorState.DEAD]:
            del self.actors[name]
            self._dirty_actors.add(name)

    def next_epoch(self) -> int:
        """The next node registration epoch. With durable state the stored counter keeps
        it growing across restarts; without, the wall clock (ms) is the floor."""
        # The first epoch of a cluster starts at the wall clock (ms) so that epochs of
        # different clusters (and a guess such as 1) do not collide; from then on only
        # the counter orders them.
        floor = int(time.time() * 1000) if not self.store.durable or self._last_epoch == 0 else 0
        self._last_epoch = max(self._last_epoch + 1, floor)
        return self._last_epoch

    # ---------------------------------------------------------------- lookups

    def live_node(self, node_id: str, epoch: int) -> NodeRecord:
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

    # ---------------------------------------------------------------- the store

    def flush(self, also: Callable[[Batch], None] = lambda batch: None) -> None:
        """Commit every changed record, and what `also` adds to the batch (the jobs'
        rows), in one transaction."""
        batch = Batch()
        for name in self._dirty_actors:
            rec = self.actors.get(name)
            batch.put("actors", name, rec.to_row() if rec is not None else None)
        for node_id in self._dirty_nodes:
            node = self.nodes.get(node_id)
            batch.put("nodes", node_id, node.to_row() if node is not None else None)
        also(batch)
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

    def load(self) -> Loaded | None:
        """What the store holds of an earlier coordinator; None if it holds nothing."""
        loaded = self.store.load()
        return loaded if any(loaded.tables.values()) else None

    def restore(self, loaded: Loaded, heard_at: float) -> None:
        """Take the records and counters of `loaded`. Restored nodes count as last heard
        from at `heard_at` (their liveness is learned again)."""
        meta = {k: int.from_bytes(v, "big") for k, v in loaded.meta.items()}
        self._saved_meta = dict(meta)
        self._last_epoch = meta.get("last_epoch", 0)
        self.events.seq = meta.get("event_seq", 0)
        for name, row in loaded.tables["actors"].items():
            self.actors[name] = ActorRecord.from_row(row)
        for node_id, row in loaded.tables["nodes"].items():
            self.nodes[node_id] = NodeRecord.from_row(node_id, row, heard_at)
