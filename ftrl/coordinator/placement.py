"""Placement: which node an actor goes to, and when waiting actors are started
(a part of Controller)."""

from __future__ import annotations

import logging

from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord
from ftrl.wire import ftrl_pb2 as pb

log = logging.getLogger("ftrl.coordinator.controller")
E = pb.EventType
#: How many incarnations a worker may use for local restarts before asking again.
LOCAL_RESTART_RANGE = 1000


class Placement:
    """Where and when actors start (a part of Controller)."""

    def _choose_node(self, rec: ActorRecord) -> NodeRecord | None:
        need = rec.resources
        best: NodeRecord | None = None
        best_key: tuple[float, int] | None = None
        for node in self.nodes.values():
            if not node.schedulable() or not node.fits(need):
                continue
            key = (-node.available().get("cpu", 0.0), len(node.actors))
            if best_key is None or key < best_key:
                best, best_key = node, key
        return best

    def _capacity_changed(self) -> None:
        """Resources were freed or nodes came or went: waiting actors may fit now."""
        self._dirty = True

    def _pump(self) -> None:
        """Start every waiting actor whose backoff has passed and that has a node.

        Cheap when nothing can change: tick() runs it only after capacity changed or
        when a backoff ends, and one pump tries each resource shape that found no
        node only once (thousands of unplaceable actors cost one scan, not one each).
        """
        self._dirty = False
        self._wake_at = float("inf")
        if not self._waiting:
            return
        now = self.clock()
        no_room: set[tuple] = set()
        for name in sorted(self._waiting):
            rec = self.actors.get(name)
            if rec is None or rec.state not in (ActorState.PENDING, ActorState.RESTARTING):
                self._waiting.discard(name)
                continue
            if rec.start_at > now:
                self._wake_at = min(self._wake_at, rec.start_at)
                continue
            self._try_start(rec, no_room)

    def _try_start(self, rec: ActorRecord, no_room: set[tuple] | None = None) -> bool:
        """Send StartActor for a waiting actor if a node has room; True if sent."""
        start_at = max(rec.start_at, self._grace_until)
        if start_at > self.clock():
            self._wake_at = min(self._wake_at, start_at)
            return False
        node = self.nodes.get(rec.node_id) if rec.node_id else None
        if node is None or not node.schedulable() or rec.name not in node.actors:
            if node is not None:
                node.release(rec.name, rec.resources)
            shape = tuple(sorted(rec.spec.resources.items()))
            if no_room is not None and shape in no_room:
                return False
            node = self._choose_node(rec)
            if node is None:
                if no_room is not None:
                    no_room.add(shape)
                return False
            node.reserve(rec.name, rec.resources)
            rec.node_id = node.node_id
        local_until = rec.incarnation + LOCAL_RESTART_RANGE
        msg = pb.CoordinatorMessage(start=pb.StartActor(
            spec=rec.spec, incarnation=rec.incarnation, restarts=rec.restarts,
            local_until=local_until))
        if not self.send(node.node_id, msg):
            self._dirty = True  # retry on the next tick
            return False
        rec.node_epoch = node.epoch
        rec.local_until = local_until
        self._waiting.discard(rec.name)
        if rec.state == ActorState.PENDING:
            rec.set_state(ActorState.STARTING)
        self._changed(rec)
        return True

    def _wait_for_start(self, rec: ActorRecord) -> None:
        """Queue `rec` to be started (now, or after its backoff)."""
        self._waiting.add(rec.name)
        self._try_start(rec)

    def _move(self, rec: ActorRecord, why: str) -> None:
        """Give `rec` a new incarnation on another node (not counted as a restart)."""
        self._emit(E.EVENT_DIED, rec, message=why)
        rec.incarnation = self._incarnation_elsewhere(rec)
        rec.node_id, rec.address, rec.pid = "", "", 0
        rec.start_at = 0.0
        rec.set_state(ActorState.RESTARTING)
        self._wait_for_start(rec)

    @staticmethod
    def _could_ever_fit(node: NodeRecord, need: dict[str, float]) -> bool:
        return all(node.resources.get(k, 0.0) >= v for k, v in need.items() if v > 0)
