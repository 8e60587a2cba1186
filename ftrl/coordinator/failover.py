"""Failover: what happens when an actor dies, with the one restart policy
(ftrl.util.restart_policy) the workers apply too.

- A dead actor is restarted in place (same node) while it has restarts left
  (`max_restarts`, -1 = unlimited). The worker usually restarts it locally at
  once and tells us (`restarting_locally`); otherwise it goes back to the start
  queue (ftrl.coordinator.placement), after a capped backoff when it keeps
  crashing right after starting.
- Out of restarts -> DEAD; the death reason names the last failure.
- Each unexpected actor death counts against its node; a node over
  `max_node_failures` is EXCLUDED: its actors move to other nodes and the
  launcher hook is asked to relaunch it.
- An actor that leaves its node (lost, excluded, drained) gets an incarnation past
  every number that node could still use, so an old copy is always fenced.
- Reports are deduplicated by (actor, incarnation, kind).
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from ftrl.coordinator.launcher import NodeLauncher
from ftrl.coordinator.placement import Placement
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.settings import Clock, ControllerConfig, Send
from ftrl.coordinator.state import ClusterState
from ftrl.wire import ftrl_pb2 as pb

log = logging.getLogger("ftrl.coordinator.controller")
E = pb.EventType
#: Incarnations and restart ranges stay far below int64 (so +1 and +range never overflow).
MAX_INCARNATION = 1 << 53
_DEDUP_KEYS = 100_000


def incarnation_elsewhere(rec: ActorRecord) -> int:
    """The next incarnation when the actor leaves its node: past every number
    that node could still use for local restarts, so none is ever run twice."""
    return max(rec.incarnation + 1, rec.local_until)


def out_of_restarts(rec: ActorRecord, reason: str) -> str:
    """The death reason of an actor with no restarts left after `reason`."""
    first, _, details = reason.partition("\n")
    text = f"{first}; no restarts left (max_restarts={rec.spec.max_restarts})"
    return f"{text}\n{details}" if details else text


class Failover:
    """Actor deaths, restarts, moves and stops; node exclusion (see the module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        placement: Placement,
        config: ControllerConfig,
        send: Send,
        clock: Clock,
        launcher: NodeLauncher,
    ) -> None:
        self._state = state
        self._placement = placement
        self._config = config
        self._send = send
        self._clock = clock
        self._launcher = launcher
        self.policy = config.restart_policy
        self._seen: OrderedDict[tuple[str, int, int], None] = OrderedDict()  # reports seen

    # ---------------------------------------------------------------- commands to nodes

    def stop(self, node_id: str, name: str, incarnation: int, reason: str, fenced: bool = False) -> None:
        """Tell a node to stop an actor; if it cannot be told now (its stream is not
        open), the stop waits on the node record and goes out when it connects."""
        stop = pb.StopActor(name=name, incarnation=incarnation, reason=reason, fenced=fenced)
        if self._send(node_id, pb.CoordinatorMessage(stop=stop)):
            return
        node = self._state.nodes.get(node_id)
        if node is not None:
            node.pending_stops[name] = stop

    # ---------------------------------------------------------------- actor states

    def set_alive(self, rec: ActorRecord) -> None:
        """The current incarnation serves calls."""
        restarted = rec.restarts > 0 or rec.incarnation > 1
        why = rec.death_reason.split("\n", 1)[0] if restarted else ""  # what the restart followed
        rec.started_at = self._clock()
        rec.death_reason = ""
        rec.ever_alive = True
        rec.set_state(ActorState.ALIVE)
        self._state.actor_event(E.EVENT_RESTARTED if restarted else E.EVENT_ALIVE, rec, message=why)

    def mark_dead(self, rec: ActorRecord, reason: str, error_type: str = "") -> None:
        """`rec` is DEAD for good: its resources are freed, it never starts again."""
        node = self._state.nodes.get(rec.node_id)
        if node is not None:
            node.release(rec.name, rec.resources)
            self._placement.capacity_changed()
        self._placement.forget(rec.name)
        rec.death_reason = reason
        rec.error_type = error_type
        rec.address, rec.pid = "", 0
        rec.set_state(ActorState.DEAD)
        log.warning("actor %s DEAD: %s", rec.name, reason)
        self._state.actor_event(E.EVENT_DEAD, rec, message=reason)

    def actor_failed(
        self,
        rec: ActorRecord,
        reason: str,
        count_node_failure: bool = True,
        same_node: bool = True,
        error_type: str = "",
    ) -> None:
        """The current incarnation is gone and nobody restarts it yet: decide."""
        node = self._state.nodes.get(rec.node_id)
        self._state.actor_event(E.EVENT_DIED, rec, message=reason)
        self._note_crash(rec)
        if count_node_failure and node is not None:
            self._count_failure(node)
        if not self._has_restarts_left(rec):
            self.mark_dead(rec, out_of_restarts(rec, reason), error_type)
        else:
            rec.restarts += 1
            rec.incarnation = rec.incarnation + 1 if same_node else incarnation_elsewhere(rec)
            rec.address, rec.pid = "", 0
            rec.death_reason = reason
            rec.set_state(ActorState.RESTARTING)
            self._state.actor_changed(rec)
            rec.start_at = self._clock() + self.policy.delay(rec.crash_streak)
            if not same_node and node is not None:
                node.release(rec.name, rec.resources)
                rec.node_id = ""
                self._placement.capacity_changed()
            self._placement.wait_for_start(rec)
        if count_node_failure and node is not None and self._over_node_limit(node):
            self.exclude_node(node)

    def move(self, rec: ActorRecord, why: str) -> None:
        """Give `rec` a new incarnation on another node (not counted as a restart)."""
        self._state.actor_event(E.EVENT_DIED, rec, message=why)
        rec.incarnation = incarnation_elsewhere(rec)
        rec.node_id, rec.address, rec.pid = "", "", 0
        rec.start_at = 0.0
        rec.set_state(ActorState.RESTARTING)
        self._placement.wait_for_start(rec)

    def _has_restarts_left(self, rec: ActorRecord) -> bool:
        return self.policy.has_budget(rec.restarts, rec.spec.max_restarts)

    def _note_crash(self, rec: ActorRecord) -> None:
        alive_for = None if rec.started_at == 0.0 else self._clock() - rec.started_at
        rec.crash_streak = self.policy.next_streak(rec.crash_streak, alive_for)

    # ---------------------------------------------------------------- node failures

    def _count_failure(self, node: NodeRecord) -> None:
        node.count_failure(self._config.node_failure_window_s)
        self._state.mark_node(node.node_id)

    def _over_node_limit(self, node: NodeRecord) -> bool:
        limit = self._config.max_node_failures
        return node.state == NodeState.ALIVE and limit >= 0 and node.failures > limit

    def exclude_node(self, node: NodeRecord) -> None:
        """Too many actor failures on `node`: move its actors away, ask for a relaunch."""
        reason = f"{node.failures} actor failures > max_node_failures={self._config.max_node_failures}"
        node.state = NodeState.EXCLUDED
        self._placement.capacity_changed()
        log.warning("node %s EXCLUDED: %s", node.node_id, reason)
        self._state.node_event(E.EVENT_NODE_EXCLUDED, node.node_id, message=reason)
        actors = self._state.actors
        for name in sorted(node.actors):
            rec = actors.get(name)
            if rec is None or rec.node_id != node.node_id or rec.state == ActorState.DEAD:
                node.release(name, rec.resources if rec else {})
                continue
            self.stop(node.node_id, name, rec.incarnation, f"node excluded: {reason}", fenced=True)
            node.release(name, rec.resources)
            self.move(rec, f"node {node.node_id} excluded")
        if self._launcher.relaunch(node, reason):
            node.relaunch_pending = True

    # ---------------------------------------------------------------- worker reports

    def _dedup(self, name: str, incarnation: int, kind: int) -> bool:
        """True if this report was seen before (and so must be ignored)."""
        key = (name, incarnation, kind)
        if key in self._seen:
            return True
        self._seen[key] = None
        while len(self._seen) > _DEDUP_KEYS:
            self._seen.popitem(last=False)
        return False

    def report(self, node_id: str, epoch: int, r: pb.ActorReport) -> None:
        """A worker tells us what happened to one of its actors."""
        node = self._state.live_node(node_id, epoch)
        if not (0 < r.incarnation < MAX_INCARNATION and 0 <= r.next_incarnation < MAX_INCARNATION):
            log.warning("node %s reported %s with an incarnation out of range; ignored", node_id, r.name)
            return
        if self._dedup(r.name, r.incarnation, r.kind):
            return
        rec = self._state.actors.get(r.name)
        if rec is None:
            if r.kind in (pb.REPORT_STARTED,):
                self.stop(node_id, r.name, r.incarnation, "unknown actor", fenced=True)
            return
        current = rec.node_id == node_id and rec.state != ActorState.DEAD
        if r.kind == pb.REPORT_STARTED:
            if current and r.incarnation == rec.incarnation:
                rec.address, rec.pid, rec.node_epoch = r.address, r.pid, epoch
                if rec.state != ActorState.ALIVE:
                    self.set_alive(rec)
            elif current and r.incarnation > rec.incarnation:
                rec.incarnation = r.incarnation
                rec.address, rec.pid, rec.node_epoch = r.address, r.pid, epoch
                self.set_alive(rec)
            else:
                why = (f"{rec.name} is DEAD" if rec.state == ActorState.DEAD else
                       f"incarnation {r.incarnation} is stale (current {rec.incarnation} on "
                       f"{rec.node_id or 'no node'})")
                self.stop(node_id, r.name, r.incarnation, f"fenced: {why}", fenced=True)
            return
        if not current or r.incarnation != rec.incarnation:
            return  # news about an incarnation we already replaced
        if r.kind == pb.REPORT_HUNG:
            self._state.events.emit(E.EVENT_DIED, rec.name, node_id, rec.incarnation, f"hung: {r.reason}")
            return
        if r.kind == pb.REPORT_STOPPED:
            if node.state == NodeState.DRAINING and rec.state != ActorState.DEAD:
                # an actor of a draining node stopped: start it elsewhere (not a restart)
                node.release(rec.name, rec.resources)
                self.move(rec, f"moved off draining node {node.node_id}: {r.reason}")
            return
        if r.kind == pb.REPORT_START_FAILED and not rec.ever_alive:
            # The first construction failed: almost always a bad class path or kwargs.
            self._state.actor_event(E.EVENT_DIED, rec, message=r.reason)
            self.mark_dead(rec, f"failed to start: {r.reason}", r.error_type or "ActorStartError")
            return
        reason = r.reason or f"exited with code {r.exit_code}"
        if r.kind == pb.REPORT_EXITED and r.restarting_locally:
            self._restarted_locally(node, rec, r, reason)
            return
        self.actor_failed(rec, reason, error_type=r.error_type)

    def _restarted_locally(self, node: NodeRecord, rec: ActorRecord, r: pb.ActorReport, reason: str) -> None:
        """The worker restarts `rec` in place at once (under its lease): follow it."""
        self._state.actor_event(E.EVENT_DIED, rec, message=reason)
        self._note_crash(rec)
        self._count_failure(node)
        if not self._has_restarts_left(rec) or r.next_incarnation >= rec.local_until:
            self.stop(node.node_id, rec.name, r.next_incarnation, "no restarts left")
            self.mark_dead(rec, out_of_restarts(rec, reason))
        else:
            rec.restarts += 1
            rec.incarnation = r.next_incarnation
            rec.address, rec.pid = "", 0
            rec.death_reason = reason
            rec.set_state(ActorState.RESTARTING)
            self._state.actor_changed(rec)
        if self._over_node_limit(node):
            self.exclude_node(node)
