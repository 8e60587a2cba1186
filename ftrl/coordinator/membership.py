"""Membership: node registration, heartbeats, reconciliation of what a worker runs,
lost, draining and re-admitted nodes.

`Membership` owns which nodes it waits to hear from: the heartbeat order (oldest
first, so the periodic check looks at the few oldest only) and, after a coordinator
restart, the restored nodes not registered again yet. A node without heartbeats for
`heartbeat_timeout_s` is LOST; its actors get a new incarnation elsewhere (or wait as
RESTARTING until a node fits), and the old incarnations are fenced: when the node
comes back it is told to stop them. What an actor's death means is decided by
ftrl.coordinator.failover (which also excludes a node over its failure limit).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from ftrl._version import __version__
from ftrl.coordinator.failover import MAX_INCARNATION, Failover
from ftrl.coordinator.placement import LOCAL_RESTART_RANGE, Placement
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.settings import Clock, ControllerConfig, Send
from ftrl.coordinator.state import ClusterState
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from ftrl.wire.limits import (
    MAX_KWARGS_BYTES,
    check_class_path,
    check_name,
    check_resources,
)

log = logging.getLogger("ftrl.coordinator.controller")
E = pb.EventType
MAX_RUNNING_REPORTED = 10_000


def check_running(ra: pb.RunningActor) -> None:
    """Validate an actor a worker reports it runs before we adopt or trust it."""
    spec = ra.spec
    check_class_path(spec.class_path)
    check_resources(dict(spec.resources), "actor resources")
    if not (0 < ra.incarnation < MAX_INCARNATION and 0 <= ra.local_until < MAX_INCARNATION):
        raise InvalidArgumentError(
            f"incarnation {ra.incarnation} (local_until {ra.local_until}) is out of range")
    if ra.restarts < 0 or spec.max_restarts < -1 or not 0 <= spec.max_concurrency <= 1024:
        raise InvalidArgumentError("restarts, max_restarts or max_concurrency out of range")
    if len(spec.kwargs) > MAX_KWARGS_BYTES:
        raise InvalidArgumentError(f"kwargs of {len(spec.kwargs)} bytes; the limit is {MAX_KWARGS_BYTES}")


class Membership:
    """Nodes joining, staying, leaving (see the module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        placement: Placement,
        failover: Failover,
        config: ControllerConfig,
        send: Send,
        clock: Clock,
        coordinator_id: str,
        fence: Callable[[str], None],
    ) -> None:
        """`fence(node_id)` closes the stream of a node's replaced or lost registration.
        Every registration is told the coordinator's id and the failover's restart
        policy (a worker's local restarts follow it)."""
        self._state = state
        self._placement = placement
        self._failover = failover
        self._config = config
        self._send = send
        self._clock = clock
        self._coordinator_id = coordinator_id
        self._policy = failover.policy
        self._fence = fence
        self._by_heartbeat: OrderedDict[str, None] = OrderedDict()  # oldest first
        self._awaited: set[str] = set()  # restored nodes not registered again yet
        # Nothing restored (no state dir, a new one, or --recover): what workers report
        # is the truth, adopted (a running job comes back from its driver's spec).
        self._adopt_unknown = config.adopt_unknown_actors

    def restore(self) -> bool:
        """After the records were restored: wait for every node not LOST (each is lost
        unless it registers or beats before its restored heartbeat times out). An
        actor we have no record of is a leftover from now on, stopped. True if some
        node is awaited."""
        self._adopt_unknown = False
        for node in self._state.nodes.values():
            if node.state != NodeState.LOST:
                self._by_heartbeat[node.node_id] = None
        self._awaited = set(self._by_heartbeat)
        return bool(self._awaited)

    def lose_silent_nodes(self, now: float) -> None:
        """Declare LOST every node not heard from for `heartbeat_timeout_s`."""
        deadline = now - self._config.heartbeat_timeout_s
        while self._by_heartbeat:
            node_id = next(iter(self._by_heartbeat))
            node = self._state.nodes.get(node_id)
            if node is None or node.state == NodeState.LOST:
                self._by_heartbeat.pop(node_id)
                continue
            if node.last_heartbeat > deadline:
                break
            self._lose_node(node, f"no heartbeat for {now - node.last_heartbeat:.1f}s")

    def register_node(self, req: pb.RegisterNodeRequest) -> pb.RegisterNodeReply:
        """A worker (re)joins. Reconciles the actors it reports with our records."""
        check_name(req.node_id, "node id")
        if not req.session_id or len(req.session_id) > 128:
            raise InvalidArgumentError("session id must be 1..128 characters")
        if not req.address or len(req.address) > 256:
            raise InvalidArgumentError("node address must be 1..256 characters")
        resources = check_resources(dict(req.resources), "node resources")
        if len(req.running) > MAX_RUNNING_REPORTED:
            raise ResourceExhaustedError(
                f"{len(req.running)} running actors reported; the limit is {MAX_RUNNING_REPORTED}"
            )
        if req.version != __version__:
            raise FailedPreconditionError(
                f"worker {req.node_id!r} runs ftrl {req.version or '(unknown)'} but this coordinator "
                f"runs ftrl {__version__}; install the same version on every node")
        now = self._clock()
        old = self._state.nodes.get(req.node_id)
        if (
            old is not None
            and old.session_id != req.session_id
            and old.state != NodeState.LOST
            and old.connected
        ):
            raise AlreadyExistsError(
                f"node id {req.node_id!r} is already registered by a live worker "
                f"(pid {old.pid} on {old.hostname or old.address}); give each worker a "
                "unique --node-id"
            )
        epoch = self._state.next_epoch()
        node = NodeRecord(
            node_id=req.node_id,
            session_id=req.session_id,
            address=req.address,
            resources=resources,
            slots=req.slots,
            epoch=epoch,
            hostname=req.hostname,
            pid=req.pid,
            log_port=req.log_port,
            last_heartbeat=now,
        )
        relaunched = old is None or old.session_id != req.session_id
        if old is not None:
            if old.connected:
                self._fence(old.node_id)  # close the old stream
            # A node keeps its failures and its exclusion across worker restarts (under
            # systemd Restart=always a crash-looping node would otherwise never be
            # excluded); only an explicit relaunch by the launcher or an operator's
            # `ftrl node readmit` starts it clean.
            if not (relaunched and old.relaunch_pending):
                node.failure_times = list(old.failure_times)
                node.relaunch_pending = old.relaunch_pending
                node.expire_failures(self._config.node_failure_window_s)
                limit = self._config.max_node_failures
                if old.state == NodeState.EXCLUDED or (limit >= 0 and node.failures > limit):
                    node.state = NodeState.EXCLUDED  # also when it was LOST meanwhile
            # Actors placed there stay assigned; reconciliation below decides.
            node.actors = set(old.actors)
            node.used = dict(old.used)
            node.pending_stops = dict(old.pending_stops)
        self._state.put_node(node)
        if self._awaited:
            self._awaited.discard(req.node_id)
            if not self._awaited:  # every node is back: no need to wait any longer
                self._placement.end_grace(now)
        self._by_heartbeat[req.node_id] = None
        self._by_heartbeat.move_to_end(req.node_id)
        stops = self._reconcile(node, req.running, was_lost=old is not None and old.state == NodeState.LOST)
        log.info(
            "node %s registered (epoch %d, %s, resources %s, %d running actors, %d to stop)",
            node.node_id, epoch, "new session" if relaunched else "reconnect",
            resources, len(req.running), len(stops),
        )
        self._state.node_event(E.EVENT_NODE_JOINED, node.node_id, message=f"epoch {epoch}")
        return pb.RegisterNodeReply(
            node_epoch=epoch,
            heartbeat_interval_s=self._config.heartbeat_interval_s,
            heartbeat_timeout_s=self._config.heartbeat_timeout_s,
            stop=stops,
            coordinator_id=self._coordinator_id,
            restart_backoff_base_s=self._policy.backoff_base_s,
            restart_backoff_cap_s=self._policy.backoff_cap_s,
            quick_crash_s=self._policy.quick_crash_s,
        )

    def _reconcile(self, node: NodeRecord, running, was_lost: bool) -> list[pb.StopActor]:
        stops: list[pb.StopActor] = []
        reported: set[str] = set()
        for ra in running:
            name = ra.spec.name
            try:
                check_name(name, "actor name")
            except InvalidArgumentError:
                continue
            try:
                check_running(ra)
            except InvalidArgumentError as e:
                stops.append(pb.StopActor(name=name, incarnation=ra.incarnation,
                                          reason=f"refused: {e}", fenced=True))
                continue
            reported.add(name)
            self._state.mark_actor(name)
            rec = self._state.actors.get(name)
            if rec is None:
                if self._adopt_unknown and not was_lost:
                    self._adopt(node, ra)
                else:
                    stops.append(pb.StopActor(name=name, incarnation=ra.incarnation,
                                              reason="unknown to the coordinator", fenced=True))
                continue
            ours = rec.node_id == node.node_id and rec.state != ActorState.DEAD
            if ours and rec.incarnation == ra.incarnation:
                rec.address, rec.pid, rec.node_epoch = ra.address, ra.pid, node.epoch
                if ra.address and rec.state in (ActorState.STARTING, ActorState.RESTARTING):
                    self._failover.set_alive(rec)
            elif ours and ra.incarnation > rec.incarnation and not was_lost:
                # The worker restarted it locally while its reports did not reach us.
                rec.incarnation, rec.restarts = ra.incarnation, max(rec.restarts, ra.restarts)
                rec.address, rec.pid, rec.node_epoch = ra.address, ra.pid, node.epoch
                if ra.address:
                    self._failover.set_alive(rec)
            elif (rec.adopted and rec.state != ActorState.DEAD and ra.incarnation > rec.incarnation
                  and self._adopt_unknown and not was_lost):
                # Without durable state the first report won; this one is newer (the
                # older copy is a leftover of a partition): keep this one, fence that.
                self._readopt(rec, node, ra)
            else:
                why = (
                    f"fenced: {name} incarnation {ra.incarnation} was replaced by incarnation "
                    f"{rec.incarnation} on node {rec.node_id or '(none)'}"
                    if rec.state != ActorState.DEAD
                    else f"{name} is DEAD: {rec.death_reason}"
                )
                stops.append(pb.StopActor(name=name, incarnation=ra.incarnation, reason=why, fenced=True))
        # Actors we placed here that the worker does not run any more died meanwhile.
        for name in sorted(node.actors - reported):
            rec = self._state.actors.get(name)
            if rec is None or rec.node_id != node.node_id or rec.state == ActorState.DEAD:
                continue
            if rec.state in (ActorState.ALIVE, ActorState.STARTING, ActorState.RESTARTING):
                if rec.state == ActorState.RESTARTING and self._placement.is_waiting(name):
                    continue  # a start is already on its way
                self._failover.actor_failed(rec, "not running on its node after the node reconnected",
                                            count_node_failure=False)
        return stops

    def _adopt(self, node: NodeRecord, ra: pb.RunningActor) -> None:
        rec = ActorRecord(spec=ra.spec, incarnation=ra.incarnation, restarts=ra.restarts)
        rec.node_id, rec.address, rec.pid, rec.node_epoch = node.node_id, ra.address, ra.pid, node.epoch
        rec.local_until = ra.local_until or ra.incarnation + LOCAL_RESTART_RANGE
        rec.started_at = self._clock()
        rec.ever_alive = True
        rec.adopted = True
        node.reserve(rec.name, rec.resources)
        self._state.put_actor(rec)
        rec.set_state(ActorState.ALIVE if ra.address else ActorState.STARTING)
        log.info("adopted actor %s (incarnation %d) reported by node %s", rec.name, rec.incarnation, node.node_id)
        self._state.actor_event(E.EVENT_ALIVE, rec, message="adopted from a worker report")

    def _readopt(self, rec: ActorRecord, node: NodeRecord, ra: pb.RunningActor) -> None:
        old = self._state.nodes.get(rec.node_id)
        if old is not None:
            old.release(rec.name, rec.resources)
            self._failover.stop(old.node_id, rec.name, rec.incarnation,
                                f"fenced: incarnation {ra.incarnation} of {rec.name} runs on {node.node_id}",
                                fenced=True)
        log.warning("actor %s: node %s reports incarnation %d, newer than the adopted %d on %s",
                    rec.name, node.node_id, ra.incarnation, rec.incarnation, rec.node_id)
        rec.incarnation, rec.restarts = ra.incarnation, max(rec.restarts, ra.restarts)
        rec.node_id, rec.address, rec.pid, rec.node_epoch = node.node_id, ra.address, ra.pid, node.epoch
        rec.local_until = ra.local_until or ra.incarnation + LOCAL_RESTART_RANGE
        node.reserve(rec.name, rec.resources)
        rec.set_state(ActorState.ALIVE if ra.address else ActorState.STARTING)
        self._state.actor_event(E.EVENT_ALIVE, rec,
                                message=f"adopted the newer incarnation from {node.node_id}")

    def connect_node(self, node_id: str, epoch: int) -> NodeRecord:
        """The node's stream is open: it can receive commands now."""
        node = self._state.live_node(node_id, epoch)
        node.connected = True
        self.heartbeat(node_id, epoch)
        pending, node.pending_stops = node.pending_stops, {}
        for stop in pending.values():
            self._failover.stop(node_id, stop.name, stop.incarnation, stop.reason, stop.fenced)
        self._placement.capacity_changed()
        self._placement.pump()
        return node

    def disconnect_node(self, node_id: str, epoch: int) -> None:
        node = self._state.nodes.get(node_id)
        if node is not None and node.epoch == epoch:
            node.connected = False

    def worker_gone(self, node_id: str, epoch: int, reason: str) -> None:
        """The worker of this registration is gone for sure (its stream ended and its
        port refuses connections): the node is lost now, not after the heartbeat
        timeout. A node that reconnected or registered again meanwhile is left alone."""
        node = self._state.nodes.get(node_id)
        if node is None or node.epoch != epoch or node.connected or node.state == NodeState.LOST:
            return
        self._lose_node(node, reason)

    def heartbeat(self, node_id: str, epoch: int) -> None:
        node = self._state.live_node(node_id, epoch)
        node.last_heartbeat = self._clock()
        self._by_heartbeat.move_to_end(node_id)

    def _lose_node(self, node: NodeRecord, reason: str) -> None:
        node.state = NodeState.LOST
        node.lost_at = self._clock()
        was_connected, node.connected = node.connected, False
        self._by_heartbeat.pop(node.node_id, None)
        log.warning("node %s LOST: %s", node.node_id, reason)
        self._state.node_event(E.EVENT_NODE_LOST, node.node_id, message=reason)
        if was_connected:
            self._fence(node.node_id)
        for name in sorted(node.actors):
            rec = self._state.actors.get(name)
            node.release(name, rec.resources if rec else {})
            if rec is None or rec.node_id != node.node_id or rec.state == ActorState.DEAD:
                continue
            self._failover.actor_failed(rec, f"node {node.node_id} lost ({reason})",
                                        count_node_failure=False, same_node=False)

    def drain_node(self, node_id: str, epoch: int, reason: str) -> None:
        """The node's worker got SIGTERM: place nothing more there and move its actors
        away, each stopped gracefully first (a driver checkpoints) and then started on
        another node when its worker reports it stopped."""
        node = self._state.live_node(node_id, epoch)
        if node.state == NodeState.DRAINING:
            return
        node.state = NodeState.DRAINING
        self._placement.capacity_changed()
        why = f"node {node_id} draining: {reason or 'its worker was told to stop'}"
        log.warning("%s; moving %d actors", why, len(node.actors))
        self._state.node_event(E.EVENT_NODE_DRAINING, node_id, message=reason)
        for name in sorted(node.actors):
            rec = self._state.actors.get(name)
            if rec is None or rec.node_id != node_id or rec.state == ActorState.DEAD:
                continue
            if rec.state in (ActorState.PENDING, ActorState.RESTARTING) and self._placement.is_waiting(name):
                node.release(name, rec.resources)
                rec.node_id = ""
                continue
            stop = pb.StopActor(name=name, incarnation=rec.incarnation, reason=why, drain=True)
            self._send(node_id, pb.CoordinatorMessage(stop=stop))

    def readmit_node(self, node_id: str) -> NodeRecord:
        """An operator re-admits an EXCLUDED node: its failure count starts again."""
        node = self._state.nodes.get(node_id)
        if node is None:
            raise NotFoundError(f"no node {node_id!r}; `ftrl status` lists the nodes")
        if node.state != NodeState.EXCLUDED:
            raise FailedPreconditionError(f"node {node_id!r} is {node.state.value}, not EXCLUDED")
        node.failure_times, node.failures = [], 0
        node.state = NodeState.ALIVE
        self._placement.capacity_changed()
        log.warning("node %s re-admitted by an operator", node_id)
        self._state.node_event(E.EVENT_NODE_READMITTED, node_id, message="re-admitted by an operator")
        return node

    def forget_lost_nodes(self, now: float) -> None:
        """Drop records of nodes lost for longer than `lost_node_retention_s` that hold
        nothing (a restarted worker with a new default id would otherwise add one
        record per restart, forever)."""
        retention = self._config.lost_node_retention_s
        for node_id in [n.node_id for n in self._state.nodes.values()
                        if n.state == NodeState.LOST and now - n.lost_at > retention
                        and not n.actors and not n.pending_stops]:
            self._state.forget_node(node_id)
