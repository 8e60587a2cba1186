"""The coordinator's brain: membership, actor registry, placement and failover policy.

Plain synchronous code with no network: the gRPC servicer feeds it inputs
(registrations, heartbeats, worker reports, client requests, clock ticks) and it
answers with messages for nodes (through the injected `send`) and events. All
of it runs on the coordinator's event loop thread, so no locks are needed.

Failover policy, in one place:
- A dead actor is restarted in place (same node) while it has restarts left
  (`max_restarts`, -1 = unlimited). The worker usually restarts it locally at
  once and tells us (`restarting_locally`); otherwise we send StartActor, after
  a capped backoff when it keeps crashing right after starting.
- Out of restarts -> DEAD; the death reason names the last failure.
- Each unexpected actor death counts against its node; a node over
  `max_node_failures` is EXCLUDED: its actors move to other nodes and the
  launcher hook is asked to relaunch it.
- A node without heartbeats for `heartbeat_timeout_s` is LOST; its actors get a
  new incarnation elsewhere (or wait as RESTARTING until a node fits), and the
  old incarnations are fenced: when the node comes back it is told to stop them.
- Reports are deduplicated by (actor, incarnation, kind).
"""

from __future__ import annotations

import functools
import logging
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ftrl import __version__
from ftrl.coordinator.events import EventLog
from ftrl.coordinator.launcher import LoggingLauncher, NodeLauncher
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.rendezvous import MeshRegistry
from ftrl.coordinator.store import Batch, MemoryStore, SQLiteStore
from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    StaleIncarnationError,
)
from ftrl.wire.limits import (
    MAX_ACTORS,
    MAX_KWARGS_BYTES,
    check_class_path,
    check_name,
    check_resources,
)

log = logging.getLogger(__name__)

E = pb.EventType
DEFAULT_RESOURCES = {"cpu": 1.0}
MAX_RUNNING_REPORTED = 10_000
#: How many incarnations a worker may use for local restarts before asking again.
LOCAL_RESTART_RANGE = 1000
_DEDUP_KEYS = 100_000
#: Incarnations and restart ranges stay far below int64 (so +1 and +range never overflow).
MAX_INCARNATION = 1 << 53


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


@dataclass
class ControllerConfig:
    """Coordinator policy knobs."""

    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    max_node_failures: int = 100  # -1: never exclude a node
    restart_backoff_base_s: float = 0.1
    restart_backoff_cap_s: float = 2.0
    quick_crash_s: float = 1.0  # a death sooner than this after start counts as a crash loop
    adopt_unknown_actors: bool = True  # no durable state: trust what workers report
    lost_node_retention_s: float = 3600.0  # forget an empty LOST node after this long
    max_actors: int = MAX_ACTORS
    node_failure_window_s: float = 3600.0  # max_node_failures counts failures this recent
    restart_grace_s: float | None = None  # after a restart, wait this long for workers (None: heartbeat timeout)
    job_unhealthy_timeout_s: float = 300.0  # a running job with no live runner this long FAILS

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.restart_backoff_base_s, self.restart_backoff_cap_s, self.quick_crash_s)

    def validate(self) -> None:
        if not (0 < self.heartbeat_interval_s < self.heartbeat_timeout_s):
            raise InvalidArgumentError(
                "need 0 < heartbeat interval < heartbeat timeout, got "
                f"{self.heartbeat_interval_s} and {self.heartbeat_timeout_s}"
            )
        if self.node_failure_window_s <= 0:
            raise InvalidArgumentError("node_failure_window_s must be > 0")
        try:
            self.restart_policy.validate()
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from None


Send = Callable[[str, pb.CoordinatorMessage], bool]


def durable(method):
    """Write every record the call changed in one transaction before it returns (and so
    before the caller is answered), also when it raised after changing something."""

    @functools.wraps(method)
    def wrapper(self: Controller, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            self.flush()

    return wrapper


class Controller:
    """Cluster state plus the failover policy; see the module docstring."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        send: Send | None = None,
        launcher: NodeLauncher | None = None,
        clock: Callable[[], float] = time.monotonic,
        store: MemoryStore | SQLiteStore | None = None,
        recover: bool = False,
    ) -> None:
        self.config = config or ControllerConfig()
        self.config.validate()
        self.send: Send = send or (lambda node_id, msg: False)
        self.launcher = launcher or LoggingLauncher()
        self.clock = clock
        self.coordinator_id = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.started = clock()
        self.nodes: dict[str, NodeRecord] = {}
        self.actors: dict[str, ActorRecord] = {}
        self.events = EventLog()
        self._by_heartbeat: OrderedDict[str, None] = OrderedDict()  # oldest first
        self._seen: OrderedDict[tuple[str, int, int], None] = OrderedDict()
        self._waiting: set[str] = set()  # actors to start or place
        self._dirty = False  # capacity changed since the last pump
        self._wake_at = float("inf")  # when the next backoff of a waiting actor ends
        self._last_epoch = 0
        self.on_actor_change: Callable[[str], None] = lambda name: None
        self.meshes = MeshRegistry(self.actors.get)
        self.on_node_fenced: Callable[[str], None] = lambda node_id: None
        self.policy = self.config.restart_policy
        self.store = store or MemoryStore()
        # Without durable state the first worker report is the truth; with it, an actor
        # we have no record of is stopped (unless rebuilding a lost database: --recover).
        self.adopt_unknown = self.config.adopt_unknown_actors and (recover or not self.store.durable)
        self._dirty_actors: set[str] = set()
        self._dirty_nodes: set[str] = set()
        self._saved_meta: dict[str, int] = {}
        self._grace_until = 0.0
        self._awaited: set[str] = set()  # restored nodes not registered again yet
        from ftrl.coordinator.jobs import JobTable  # after the records it builds on

        self.jobs = JobTable(self)
        self.restored = self._restore()

    # ------------------------------------------------------------------ durable state

    def _restore(self) -> bool:
        """Load the records of an earlier coordinator on this state dir. Nodes wait up
        to the grace period to register again with what they run; nothing is placed
        until then, so an actor still running is adopted, not started twice."""
        loaded = self.store.load()
        if not any(loaded.tables.values()):
            return False
        now = self.clock()
        meta = {k: int.from_bytes(v, "big") for k, v in loaded.meta.items()}
        self._saved_meta = dict(meta)
        self._last_epoch = meta.get("last_epoch", 0)
        self.events.seq = meta.get("event_seq", 0)
        for name, row in loaded.tables["actors"].items():
            rec = ActorRecord.from_row(row)
            self.actors[name] = rec
        for node_id, row in loaded.tables["nodes"].items():
            node = NodeRecord.from_row(node_id, row, now)
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
        grace = self.config.restart_grace_s
        self._grace_until = now + (self.config.heartbeat_timeout_s if grace is None else grace)
        self._awaited = {n.node_id for n in self.nodes.values() if n.state != NodeState.LOST}
        self._wake_at = self._grace_until
        self.jobs.restore(loaded.tables["jobs"])
        log.info("restored %d nodes, %d actors and %d jobs from the state store; waiting up to "
                 "%.1fs for workers to re-register", len(self.nodes), len(self.actors),
                 len(self.jobs.jobs), self._grace_until - now)
        return True

    def in_grace(self) -> bool:
        return self.clock() < self._grace_until

    def mark_node(self, node_id: str) -> None:
        self._dirty_nodes.add(node_id)

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

    # ------------------------------------------------------------------ helpers

    def _next_epoch(self) -> int:
        """The next node registration epoch. With durable state the stored counter keeps
        it growing across restarts; without, the wall clock (ms) is the only floor."""
        floor = 0 if self.store.durable else int(time.time() * 1000)
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

    def _stop(self, node_id: str, name: str, incarnation: int, reason: str, fenced: bool = False) -> None:
        """Tell a node to stop an actor; if it cannot be told now (its stream is not
        open), the stop waits on the node record and goes out when it connects."""
        stop = pb.StopActor(name=name, incarnation=incarnation, reason=reason, fenced=fenced)
        if self.send(node_id, pb.CoordinatorMessage(stop=stop)):
            return
        node = self.nodes.get(node_id)
        if node is not None:
            node.pending_stops[name] = stop

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

    # ------------------------------------------------------------------ nodes

    @durable
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
        now = self.clock()
        old = self.nodes.get(req.node_id)
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
        epoch = self._next_epoch()
        node = NodeRecord(
            node_id=req.node_id,
            session_id=req.session_id,
            address=req.address,
            resources=resources,
            slots=req.slots,
            epoch=epoch,
            hostname=req.hostname,
            pid=req.pid,
            last_heartbeat=now,
        )
        relaunched = old is None or old.session_id != req.session_id
        if old is not None:
            if old.connected:
                self.on_node_fenced(old.node_id)  # close the old stream
            # A node keeps its failures and its exclusion across worker restarts (under
            # systemd Restart=always a crash-looping node would otherwise never be
            # excluded); only an explicit relaunch by the launcher or an operator's
            # `ftrl node readmit` starts it clean.
            if not (relaunched and old.relaunch_pending):
                node.failure_times = list(old.failure_times)
                node.relaunch_pending = old.relaunch_pending
                node.expire_failures(self.config.node_failure_window_s)
                limit = self.config.max_node_failures
                if old.state == NodeState.EXCLUDED or (limit >= 0 and node.failures > limit):
                    node.state = NodeState.EXCLUDED  # also when it was LOST meanwhile
            # Actors placed there stay assigned; reconciliation below decides.
            node.actors = set(old.actors)
            node.used = dict(old.used)
            node.pending_stops = dict(old.pending_stops)
        self.nodes[req.node_id] = node
        self._dirty_nodes.add(req.node_id)
        if self._awaited:
            self._awaited.discard(req.node_id)
            if not self._awaited:  # every node is back: no need to wait any longer
                self._grace_until = now
                self._capacity_changed()
        self._by_heartbeat[req.node_id] = None
        self._by_heartbeat.move_to_end(req.node_id)
        stops = self._reconcile(node, req.running, was_lost=old is not None and old.state == NodeState.LOST)
        log.info(
            "node %s registered (epoch %d, %s, resources %s, %d running actors, %d to stop)",
            node.node_id, epoch, "new session" if relaunched else "reconnect",
            resources, len(req.running), len(stops),
        )
        self._emit(E.EVENT_NODE_JOINED, node_id=node.node_id, message=f"epoch {epoch}")
        return pb.RegisterNodeReply(
            node_epoch=epoch,
            heartbeat_interval_s=self.config.heartbeat_interval_s,
            heartbeat_timeout_s=self.config.heartbeat_timeout_s,
            stop=stops,
            coordinator_id=self.coordinator_id,
            restart_backoff_base_s=self.policy.backoff_base_s,
            restart_backoff_cap_s=self.policy.backoff_cap_s,
            quick_crash_s=self.policy.quick_crash_s,
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
            self._dirty_actors.add(name)
            rec = self.actors.get(name)
            if rec is None:
                if self.adopt_unknown and not was_lost:
                    self._adopt(node, ra)
                else:
                    stops.append(pb.StopActor(name=name, incarnation=ra.incarnation,
                                              reason="unknown to the coordinator", fenced=True))
                continue
            ours = rec.node_id == node.node_id and rec.state != ActorState.DEAD
            if ours and rec.incarnation == ra.incarnation:
                rec.address, rec.pid, rec.node_epoch = ra.address, ra.pid, node.epoch
                if ra.address and rec.state in (ActorState.STARTING, ActorState.RESTARTING):
                    self._set_alive(rec)
            elif ours and ra.incarnation > rec.incarnation and not was_lost:
                # The worker restarted it locally while its reports did not reach us.
                rec.incarnation, rec.restarts = ra.incarnation, max(rec.restarts, ra.restarts)
                rec.address, rec.pid, rec.node_epoch = ra.address, ra.pid, node.epoch
                if ra.address:
                    self._set_alive(rec)
            elif (rec.adopted and rec.state != ActorState.DEAD and ra.incarnation > rec.incarnation
                  and self.adopt_unknown and not was_lost):
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
            rec = self.actors.get(name)
            if rec is None or rec.node_id != node.node_id or rec.state == ActorState.DEAD:
                continue
            if rec.state in (ActorState.ALIVE, ActorState.STARTING, ActorState.RESTARTING):
                if rec.state == ActorState.RESTARTING and name in self._waiting:
                    continue  # a start is already on its way
                self._actor_failed(rec, "not running on its node after the node reconnected",
                                   count_node_failure=False)
        return stops

    def _adopt(self, node: NodeRecord, ra: pb.RunningActor) -> None:
        rec = ActorRecord(spec=ra.spec, incarnation=ra.incarnation, restarts=ra.restarts)
        rec.node_id, rec.address, rec.pid, rec.node_epoch = node.node_id, ra.address, ra.pid, node.epoch
        rec.local_until = ra.local_until or ra.incarnation + LOCAL_RESTART_RANGE
        rec.started_at = self.clock()
        rec.ever_alive = True
        rec.adopted = True
        node.reserve(rec.name, rec.resources)
        self.actors[rec.name] = rec
        rec.set_state(ActorState.ALIVE if ra.address else ActorState.STARTING)
        log.info("adopted actor %s (incarnation %d) reported by node %s", rec.name, rec.incarnation, node.node_id)
        self._emit(E.EVENT_ALIVE, rec, message="adopted from a worker report")

    def _readopt(self, rec: ActorRecord, node: NodeRecord, ra: pb.RunningActor) -> None:
        old = self.nodes.get(rec.node_id)
        if old is not None:
            old.release(rec.name, rec.resources)
            self._stop(old.node_id, rec.name, rec.incarnation,
                       f"fenced: incarnation {ra.incarnation} of {rec.name} runs on {node.node_id}",
                       fenced=True)
        log.warning("actor %s: node %s reports incarnation %d, newer than the adopted %d on %s",
                    rec.name, node.node_id, ra.incarnation, rec.incarnation, rec.node_id)
        rec.incarnation, rec.restarts = ra.incarnation, max(rec.restarts, ra.restarts)
        rec.node_id, rec.address, rec.pid, rec.node_epoch = node.node_id, ra.address, ra.pid, node.epoch
        rec.local_until = ra.local_until or ra.incarnation + LOCAL_RESTART_RANGE
        node.reserve(rec.name, rec.resources)
        rec.set_state(ActorState.ALIVE if ra.address else ActorState.STARTING)
        self._emit(E.EVENT_ALIVE, rec, message=f"adopted the newer incarnation from {node.node_id}")

    @durable
    def connect_node(self, node_id: str, epoch: int) -> NodeRecord:
        """The node's stream is open: it can receive commands now."""
        node = self.node(node_id, epoch)
        node.connected = True
        self.heartbeat(node_id, epoch)
        pending, node.pending_stops = node.pending_stops, {}
        for stop in pending.values():
            self._stop(node_id, stop.name, stop.incarnation, stop.reason, stop.fenced)
        self._capacity_changed()
        self._pump()
        return node

    def disconnect_node(self, node_id: str, epoch: int) -> None:
        node = self.nodes.get(node_id)
        if node is not None and node.epoch == epoch:
            node.connected = False

    def heartbeat(self, node_id: str, epoch: int) -> None:
        node = self.node(node_id, epoch)
        node.last_heartbeat = self.clock()
        self._by_heartbeat.move_to_end(node_id)

    def _lose_node(self, node: NodeRecord, reason: str) -> None:
        node.state = NodeState.LOST
        node.lost_at = self.clock()
        was_connected, node.connected = node.connected, False
        self._by_heartbeat.pop(node.node_id, None)
        log.warning("node %s LOST: %s", node.node_id, reason)
        self._emit(E.EVENT_NODE_LOST, node_id=node.node_id, message=reason)
        if was_connected:
            self.on_node_fenced(node.node_id)
        for name in sorted(node.actors):
            rec = self.actors.get(name)
            node.release(name, rec.resources if rec else {})
            if rec is None or rec.node_id != node.node_id or rec.state == ActorState.DEAD:
                continue
            self._actor_failed(rec, f"node {node.node_id} lost ({reason})",
                               count_node_failure=False, same_node=False)

    def _exclude_node(self, node: NodeRecord) -> None:
        reason = f"{node.failures} actor failures > max_node_failures={self.config.max_node_failures}"
        node.state = NodeState.EXCLUDED
        self._capacity_changed()
        log.warning("node %s EXCLUDED: %s", node.node_id, reason)
        self._emit(E.EVENT_NODE_EXCLUDED, node_id=node.node_id, message=reason)
        for name in sorted(node.actors):
            rec = self.actors.get(name)
            if rec is None or rec.node_id != node.node_id or rec.state == ActorState.DEAD:
                node.release(name, rec.resources if rec else {})
                continue
            self._stop(node.node_id, name, rec.incarnation, f"node excluded: {reason}", fenced=True)
            node.release(name, rec.resources)
            self._move(rec, f"node {node.node_id} excluded")
        if self.launcher.relaunch(node, reason):
            node.relaunch_pending = True

    @durable
    def drain_node(self, node_id: str, epoch: int, reason: str) -> None:
        """The node's worker got SIGTERM: place nothing more there and move its actors
        away, each stopped gracefully first (a driver checkpoints) and then started on
        another node when its worker reports it stopped."""
        node = self.node(node_id, epoch)
        if node.state == NodeState.DRAINING:
            return
        node.state = NodeState.DRAINING
        self._capacity_changed()
        why = f"node {node_id} draining: {reason or 'its worker was told to stop'}"
        log.warning("%s; moving %d actors", why, len(node.actors))
        self._emit(E.EVENT_NODE_DRAINING, node_id=node_id, message=reason)
        for name in sorted(node.actors):
            rec = self.actors.get(name)
            if rec is None or rec.node_id != node_id or rec.state == ActorState.DEAD:
                continue
            if rec.state in (ActorState.PENDING, ActorState.RESTARTING) and name in self._waiting:
                node.release(name, rec.resources)
                rec.node_id = ""
                continue
            stop = pb.StopActor(name=name, incarnation=rec.incarnation, reason=why, drain=True)
            self.send(node_id, pb.CoordinatorMessage(stop=stop))

    def _drained(self, node: NodeRecord, rec: ActorRecord, reason: str) -> None:
        """An actor of a draining node stopped: start it elsewhere (not a restart)."""
        node.release(rec.name, rec.resources)
        self._move(rec, f"moved off draining node {node.node_id}: {reason}")

    @durable
    def readmit_node(self, node_id: str) -> NodeRecord:
        """An operator re-admits an EXCLUDED node: its failure count starts again."""
        node = self.nodes.get(node_id)
        if node is None:
            raise NotFoundError(f"no node {node_id!r}; `ftrl status` lists the nodes")
        if node.state != NodeState.EXCLUDED:
            raise FailedPreconditionError(f"node {node_id!r} is {node.state.value}, not EXCLUDED")
        node.failure_times, node.failures = [], 0
        node.state = NodeState.ALIVE
        self._capacity_changed()
        log.warning("node %s re-admitted by an operator", node_id)
        self._emit(E.EVENT_NODE_READMITTED, node_id=node_id, message="re-admitted by an operator")
        return node

    @durable
    def tick(self) -> None:
        """Periodic work: declare silent nodes lost, start actors whose backoff ended."""
        now = self.clock()
        deadline = now - self.config.heartbeat_timeout_s
        while self._by_heartbeat:
            node_id = next(iter(self._by_heartbeat))
            node = self.nodes.get(node_id)
            if node is None or node.state == NodeState.LOST:
                self._by_heartbeat.pop(node_id)
                continue
            if node.last_heartbeat > deadline:
                break
            self._lose_node(node, f"no heartbeat for {now - node.last_heartbeat:.1f}s")
        if self._dirty or now >= self._wake_at:
            self._pump()
        self._forget_lost_nodes(now)
        self.jobs.tick(now)

    def _forget_lost_nodes(self, now: float) -> None:
        """Drop records of nodes lost for longer than `lost_node_retention_s` that hold
        nothing (a restarted worker with a new default id would otherwise add one
        record per restart, forever)."""
        retention = self.config.lost_node_retention_s
        for node_id in [n.node_id for n in self.nodes.values()
                        if n.state == NodeState.LOST and now - n.lost_at > retention
                        and not n.actors and not n.pending_stops]:
            del self.nodes[node_id]
            self._dirty_nodes.add(node_id)

    # ------------------------------------------------------------------ placement

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

    # ------------------------------------------------------------------ actor lifecycle

    @staticmethod
    def _incarnation_elsewhere(rec: ActorRecord) -> int:
        """The next incarnation when the actor leaves its node: past every number
        that node could still use for local restarts, so none is ever run twice."""
        return max(rec.incarnation + 1, rec.local_until)

    def _set_alive(self, rec: ActorRecord) -> None:
        restarted = rec.restarts > 0 or rec.incarnation > 1
        rec.started_at = self.clock()
        rec.death_reason = ""
        rec.ever_alive = True
        rec.set_state(ActorState.ALIVE)
        self._emit(E.EVENT_RESTARTED if restarted else E.EVENT_ALIVE, rec)

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

    # ------------------------------------------------------------------ client API

    @durable
    def create_actor(self, spec: pb.ActorSpec, get_if_exists: bool = False) -> ActorRecord:
        """Register a new actor and place it; returns its record (PENDING or STARTING)."""
        return self._create_actor(spec, get_if_exists)

    def _create_actor(self, spec: pb.ActorSpec, get_if_exists: bool = False) -> ActorRecord:
        check_name(spec.name, "actor name")
        check_class_path(spec.class_path)
        if spec.owner:
            check_name(spec.owner, "actor owner")
        if len(spec.kwargs) > MAX_KWARGS_BYTES:
            raise ResourceExhaustedError(
                f"actor kwargs are {len(spec.kwargs)} bytes; the limit is {MAX_KWARGS_BYTES}"
            )
        kwargs = codec.decode(spec.kwargs, codec.SMALL_LIMITS) if spec.kwargs else {}
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise InvalidArgumentError("actor kwargs must be a msgpack map with string keys")
        if spec.env:
            env = codec.decode(spec.env, codec.SMALL_LIMITS)
            if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()
            ):
                raise InvalidArgumentError("actor env must be a map of strings to strings")
            for key, value in env.items():
                if not key or "=" in key or "\0" in key or "\0" in value:
                    raise InvalidArgumentError(
                        f"actor env variable {key[:80]!r} is not valid: names must be non-empty "
                        "without '=' or NUL, values without NUL")
        if spec.max_restarts < -1:
            raise InvalidArgumentError(f"max_restarts must be >= -1, got {spec.max_restarts}")
        if spec.max_concurrency < 0 or spec.max_concurrency > 1024:
            raise InvalidArgumentError("max_concurrency must be 0..1024")
        resources = check_resources(dict(spec.resources) or DEFAULT_RESOURCES, "actor resources")
        existing = self.actors.get(spec.name)
        if existing is not None and existing.state != ActorState.DEAD:
            if get_if_exists:
                return existing
            raise AlreadyExistsError(f"an actor named {spec.name!r} exists already ({existing.state.value})")
        live = sum(1 for r in self.actors.values() if r.state != ActorState.DEAD)
        if existing is None and len(self.actors) >= self.config.max_actors:
            self._forget_dead()
        if live >= self.config.max_actors:
            raise ResourceExhaustedError(f"the cluster holds {live} actors; the limit is {self.config.max_actors}")
        if not any(self._could_ever_fit(n, resources) for n in self.nodes.values()) and self.nodes:
            log.info("actor %s needs %s; no node has that much now, it waits", spec.name, resources)
        stored = pb.ActorSpec()
        stored.CopyFrom(spec)
        stored.resources.clear()
        stored.resources.update(resources)
        if stored.max_concurrency == 0:
            stored.max_concurrency = 1
        rec = ActorRecord(spec=stored, incarnation=(existing.incarnation + 1) if existing else 1)
        self.actors[rec.name] = rec
        self._emit(E.EVENT_CREATED, rec)
        self._wait_for_start(rec)
        return rec

    @staticmethod
    def _could_ever_fit(node: NodeRecord, need: dict[str, float]) -> bool:
        return all(node.resources.get(k, 0.0) >= v for k, v in need.items() if v > 0)

    def _forget_dead(self) -> None:
        for name in [n for n, r in self.actors.items() if r.state == ActorState.DEAD]:
            del self.actors[name]
            self._dirty_actors.add(name)

    @durable
    def kill_actor(self, name: str, reason: str = "") -> ActorRecord:
        """Stop an actor for good (no restart)."""
        return self._kill_actor(name, reason)

    def _kill_actor(self, name: str, reason: str = "") -> ActorRecord:
        rec = self.actors.get(name)
        if rec is None:
            raise NotFoundError(f"no actor named {name!r}")
        if rec.state == ActorState.DEAD:
            return rec
        if rec.node_id:
            self._stop(rec.node_id, name, rec.incarnation, reason or "killed")
        self._mark_dead(rec, f"killed: {reason}" if reason else "killed")
        return rec

    # ------------------------------------------------------------------ jobs (each change durable)

    @durable
    def submit_job(self, req: pb.SubmitJobRequest):
        return self.jobs.submit(req)

    @durable
    def scale_job(self, req: pb.ScaleJobRequest):
        return self.jobs.scale(req)

    @durable
    def stop_job(self, job_id: str, reason: str = ""):
        return self.jobs.stop(job_id, reason)

    @durable
    def report_job(self, report: pb.JobReport):
        return self.jobs.report(report)

    def get_actor(self, name: str) -> ActorRecord:
        rec = self.actors.get(name)
        if rec is None:
            raise NotFoundError(f"no actor named {name!r}")
        return rec

    def check_caller(self, caller: str) -> None:
        """Refuse calls from an actor incarnation that has been replaced (fencing)."""
        if "@" not in caller:
            return  # a plain client
        name, _, inc = caller.rpartition("@")
        rec = self.actors.get(name)
        if rec is None or not inc.isdigit():
            return
        if int(inc) < rec.incarnation or (rec.state == ActorState.DEAD and int(inc) == rec.incarnation):
            raise PermissionDeniedError(
                f"caller {caller} is fenced: {name} is now incarnation {rec.incarnation} "
                f"({rec.state.value})"
            )

    def actor_info(self, rec: ActorRecord) -> pb.ActorInfo:
        """The record's proto view, with how long it is sure to stay current."""
        info = rec.to_proto()
        node = self.nodes.get(rec.node_id)
        if rec.state == ActorState.ALIVE and node is not None and node.state != NodeState.LOST:
            deadline = node.last_heartbeat + self.config.heartbeat_timeout_s
            info.valid_for_s = max(0.0, deadline - self.clock())
        return info

    def cluster_info(self) -> pb.ClusterInfo:
        return pb.ClusterInfo(
            coordinator_id=self.coordinator_id,
            version=__version__,
            uptime_s=self.clock() - self.started,
            heartbeat_interval_s=self.config.heartbeat_interval_s,
            heartbeat_timeout_s=self.config.heartbeat_timeout_s,
            max_node_failures=self.config.max_node_failures,
            event_seq=self.events.seq,
        )
