"""Failover: what happens when an actor dies, with the one restart policy
(ftrl.util.restart_policy) the workers apply too (a part of Controller)."""

from __future__ import annotations

import logging

from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.state import durable
from ftrl.wire import ftrl_pb2 as pb

log = logging.getLogger("ftrl.coordinator.controller")
E = pb.EventType
#: Incarnations and restart ranges stay far below int64 (so +1 and +range never overflow).
MAX_INCARNATION = 1 << 53


class Failover:
    """Actor deaths and restarts (a part of Controller)."""

    def _stop(self, node_id: str, name: str, incarnation: int, reason: str, fenced: bool = False) -> None:
        """Tell a node to stop an actor; if it cannot be told now (its stream is not
        open), the stop waits on the node record and goes out when it connects."""
        stop = pb.StopActor(name=name, incarnation=incarnation, reason=reason, fenced=fenced)
        if self.send(node_id, pb.CoordinatorMessage(stop=stop)):
            return
        node = self.nodes.get(node_id)
        if node is not None:
            node.pending_stops[name] = stop

    @staticmethod
    def _incarnation_elsewhere(rec: ActorRecord) -> int:
        """The next incarnation when the actor leaves its node: past every number
        that node could still use for local restarts, so none is ever run twice."""
        return max(rec.incarnation + 1, rec.local_until)

    def _set_alive(self, rec: ActorRecord) -> None:
        restarted = rec.restarts > 0 or rec.incarnation > 1
        why = rec.death_reason.split("\n", 1)[0] if restarted else ""  # what the restart followed
        rec.started_at = self.clock()
        rec.death_reason = ""
        rec.ever_alive = True
        rec.set_state(ActorState.ALIVE)
        self._emit(E.EVENT_RESTARTED if restarted else E.EVENT_ALIVE, rec, message=why)

    def _has_restarts_left(self, rec: ActorRecord) -> bool:
        return self.policy.has_budget(rec.restarts, rec.spec.max_restarts)

    def _note_crash(self, rec: ActorRecord) -> None:
        alive_for = None if rec.started_at == 0.0 else self.clock() - rec.started_at
        rec.crash_streak = self.policy.next_streak(rec.crash_streak, alive_for)

    @staticmethod
    def _out_of_restarts(rec: ActorRecord, reason: str) -> str:
        first, _, details = reason.partition("\n")
        text = f"{first}; no restarts left (max_restarts={rec.spec.max_restarts})"
        return f"{text}\n{details}" if details else text

    def _mark_dead(self, rec: ActorRecord, reason: str, error_type: str = "") -> None:
        node = self.nodes.get(rec.node_id)
        if node is not None:
            node.release(rec.name, rec.resources)
            self._capacity_changed()
        self._waiting.discard(rec.name)
        rec.death_reason = reason
        rec.error_type = error_type
        rec.address, rec.pid = "", 0
        rec.set_state(ActorState.DEAD)
        log.warning("actor %s DEAD: %s", rec.name, reason)
        self._emit(E.EVENT_DEAD, rec, message=reason)

    def _actor_failed(
        self,
        rec: ActorRecord,
        reason: str,
        count_node_failure: bool = True,
        same_node: bool = True,
        error_type: str = "",
    ) -> None:
        """The current incarnation is gone and nobody restarts it yet: decide."""
        node = self.nodes.get(rec.node_id)
        self._emit(E.EVENT_DIED, rec, message=reason)
        self._note_crash(rec)
        if count_node_failure and node is not None:
            self._count_failure(node)
        if not self._has_restarts_left(rec):
            self._mark_dead(rec, self._out_of_restarts(rec, reason), error_type)
        else:
            rec.restarts += 1
            rec.incarnation = rec.incarnation + 1 if same_node else self._incarnation_elsewhere(rec)
            rec.address, rec.pid = "", 0
            rec.death_reason = reason
            rec.set_state(ActorState.RESTARTING)
            self._changed(rec)
            rec.start_at = self.clock() + self.policy.delay(rec.crash_streak)
            if not same_node and node is not None:
                node.release(rec.name, rec.resources)
                rec.node_id = ""
                self._capacity_changed()
            self._wait_for_start(rec)
        if count_node_failure and node is not None and self._over_node_limit(node):
            self._exclude_node(node)

    def _count_failure(self, node: NodeRecord) -> None:
        node.count_failure(self.config.node_failure_window_s)
        self._dirty_nodes.add(node.node_id)

    def _over_node_limit(self, node: NodeRecord) -> bool:
        limit = self.config.max_node_failures
        return node.state == NodeState.ALIVE and limit >= 0 and node.failures > limit

    @durable
    def report(self, node_id: str, epoch: int, r: pb.ActorReport) -> None:
        """A worker tells us what happened to one of its actors."""
        node = self.node(node_id, epoch)
        if not (0 < r.incarnation < MAX_INCARNATION and 0 <= r.next_incarnation < MAX_INCARNATION):
            log.warning("node %s reported %s with an incarnation out of range; ignored", node_id, r.name)
            return
        if self._dedup(r.name, r.incarnation, r.kind):
            return
        rec = self.actors.get(r.name)
        if rec is None:
            if r.kind in (pb.REPORT_STARTED,):
                self._stop(node_id, r.name, r.incarnation, "unknown actor", fenced=True)
            return
        current = rec.node_id == node_id and rec.state != ActorState.DEAD
        if r.kind == pb.REPORT_STARTED:
            if current and r.incarnation == rec.incarnation:
                rec.address, rec.pid, rec.node_epoch = r.address, r.pid, epoch
                if rec.state != ActorState.ALIVE:
                    self._set_alive(rec)
            elif current and r.incarnation > rec.incarnation:
                rec.incarnation = r.incarnation
                rec.address, rec.pid, rec.node_epoch = r.address, r.pid, epoch
                self._set_alive(rec)
            else:
                why = (f"{rec.name} is DEAD" if rec.state == ActorState.DEAD else
                       f"incarnation {r.incarnation} is stale (current {rec.incarnation} on "
                       f"{rec.node_id or 'no node'})")
                self._stop(node_id, r.name, r.incarnation, f"fenced: {why}", fenced=True)
            return
        if not current or r.incarnation != rec.incarnation:
            return  # news about an incarnation we already replaced
        if r.kind == pb.REPORT_HUNG:
            self.events.emit(E.EVENT_DIED, rec.name, node_id, rec.incarnation, f"hung: {r.reason}")
            return
        if r.kind == pb.REPORT_STOPPED:
            if node.state == NodeState.DRAINING and rec.state != ActorState.DEAD:
                self._drained(node, rec, r.reason)
            return
        if r.kind == pb.REPORT_START_FAILED and not rec.ever_alive:
            # The first construction failed: almost always a bad class path or kwargs.
            self._emit(E.EVENT_DIED, rec, message=r.reason)
            self._mark_dead(rec, f"failed to start: {r.reason}", r.error_type or "ActorStartError")
            return
        reason = r.reason or f"exited with code {r.exit_code}"
        if r.kind == pb.REPORT_EXITED and r.restarting_locally:
            self._emit(E.EVENT_DIED, rec, message=reason)
            self._note_crash(rec)
            self._count_failure(node)
            if not self._has_restarts_left(rec) or r.next_incarnation >= rec.local_until:
                self._stop(node_id, rec.name, r.next_incarnation, "no restarts left")
                self._mark_dead(rec, self._out_of_restarts(rec, reason))
            else:
                rec.restarts += 1
                rec.incarnation = r.next_incarnation
                rec.address, rec.pid = "", 0
                rec.death_reason = reason
                rec.set_state(ActorState.RESTARTING)
                self._changed(rec)
            if self._over_node_limit(node):
                self._exclude_node(node)
            return
        self._actor_failed(rec, reason, error_type=r.error_type)
