"""The coordinator's brain: membership, actor registry, placement and failover policy.

`Controller` wires one part per job, each in its own module and owning its own state:

- `state.ClusterState`: the node and actor records, the event log, the durable store;
- `placement.Placement`: the actors waiting to start, and on which node each starts;
- `failover.Failover`: actor deaths (the restart policy), moves, stops, node exclusion;
- `membership.Membership`: nodes registering, beating, lost, draining, re-admitted;
- `jobs.JobTable` (jobs and their stages) and `rendezvous.MeshRegistry` (learner meshes),
  which follow the actor records.

Each part gets the parts below it as constructor arguments (membership > failover >
placement > state); the controller adds the client API (creating, killing and looking
up actors), the periodic tick, and the transaction around every call that changes
records (`durable`).

Plain synchronous code with no network: the gRPC servicer feeds it inputs
(registrations, heartbeats, worker reports, client requests, clock ticks) and it
answers with messages for nodes (through the injected `send`) and events. All
of it runs on the coordinator's event loop thread, so no locks are needed.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
import uuid
from collections.abc import Callable

from ftrl._version import __version__
from ftrl.coordinator.events import EventLog
from ftrl.coordinator.failover import MAX_INCARNATION, Failover
from ftrl.coordinator.jobs import JobHost, JobRecord, JobTable
from ftrl.coordinator.launcher import LoggingLauncher, NodeLauncher
from ftrl.coordinator.membership import MAX_RUNNING_REPORTED, Membership, check_running
from ftrl.coordinator.placement import (
    LOCAL_RESTART_RANGE,
    PLACEMENT_STRATEGIES,
    Placement,
    could_ever_fit,
)
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.rendezvous import MeshRegistry
from ftrl.coordinator.settings import Clock, ControllerConfig, Send
from ftrl.coordinator.state import ClusterState
from ftrl.coordinator.store import MemoryStore, SQLiteStore
from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from ftrl.wire.limits import (
    MAX_KWARGS_BYTES,
    check_class_path,
    check_name,
    check_resources,
)

log = logging.getLogger(__name__)

E = pb.EventType
DEFAULT_RESOURCES = {"cpu": 1.0}
__all__ = ["LOCAL_RESTART_RANGE", "MAX_INCARNATION", "MAX_RUNNING_REPORTED", "Controller",
           "ControllerConfig", "Send", "check_running", "durable"]


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


def checked_resources(spec: pb.ActorSpec) -> dict[str, float]:
    """Validate a client's actor spec; returns the resources it asks for (1 CPU if none)."""
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
    if spec.placement_strategy not in PLACEMENT_STRATEGIES:
        raise InvalidArgumentError(f"placement_strategy must be PACK, SPREAD or empty, got "
                                   f"{spec.placement_strategy[:40]!r}")
    return check_resources(dict(spec.resources) or DEFAULT_RESOURCES, "actor resources")


class Controller:
    """Cluster state plus the failover policy; see the module docstring.

    `send`, `clock`, `on_actor_change(name)` and `on_node_fenced(node_id)` may be set
    after construction (the server sets the hooks, `ftrl coordinator` the clock); the
    parts always use the current ones."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        send: Send | None = None,
        launcher: NodeLauncher | None = None,
        clock: Clock = time.monotonic,
        store: MemoryStore | SQLiteStore | None = None,
    ) -> None:
        self.config = config or ControllerConfig()
        self.config.validate()
        self.send: Send = send or (lambda node_id, msg: False)
        self.clock = clock
        self.on_actor_change: Callable[[str], None] = lambda name: None
        self.on_node_fenced: Callable[[str], None] = lambda node_id: None
        self.coordinator_id = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.started = clock()
        self.state = ClusterState(store or MemoryStore(), changed=self._actor_changed, died=self._actor_died)
        self.meshes = MeshRegistry(self.state.actors.get)
        self.placement = Placement(self.state, send=self._send, clock=self._now)
        self.failover = Failover(self.state, self.placement, self.config, send=self._send, clock=self._now,
                                 launcher=launcher or LoggingLauncher())
        self.membership = Membership(self.state, self.placement, self.failover, self.config,
                                     send=self._send, clock=self._now,
                                     coordinator_id=self.coordinator_id, fence=self._fence)
        self.jobs = JobTable(JobHost(
            actors=self.state.actors, events=self.state.events,
            get_or_create_actor=lambda spec: self._create_actor(spec, get_if_exists=True),
            kill_actor=self._kill_actor,
            unhealthy_timeout_s=lambda: self.config.job_unhealthy_timeout_s))
        self.restored = self._restore()

    # ------------------------------------------------------------------ wiring

    def _send(self, node_id: str, msg: pb.CoordinatorMessage) -> bool:
        return self.send(node_id, msg)

    def _now(self) -> float:
        return self.clock()

    def _fence(self, node_id: str) -> None:
        self.on_node_fenced(node_id)

    def _actor_died(self, rec: ActorRecord, message: str) -> None:
        self.meshes.actor_died(rec.name, rec.incarnation, message)

    def _actor_changed(self, rec: ActorRecord) -> None:
        self.meshes.actor_changed(rec.name)
        self.jobs.actor_changed(rec)
        self.on_actor_change(rec.name)

    @property
    def nodes(self) -> dict[str, NodeRecord]:
        return self.state.nodes

    @property
    def actors(self) -> dict[str, ActorRecord]:
        return self.state.actors

    @property
    def events(self) -> EventLog:
        return self.state.events

    @property
    def store(self) -> MemoryStore | SQLiteStore:
        return self.state.store

    @property
    def policy(self) -> RestartPolicy:
        """The restart policy (also sent to every worker at registration)."""
        return self.failover.policy

    def flush(self) -> None:
        """Commit every changed record (jobs included) in one transaction."""
        self.state.flush(self.jobs.collect)

    def _restore(self) -> bool:
        """Load the records of an earlier coordinator on this state dir. Nodes wait up
        to the grace period to register again with what they run; nothing is placed
        until then, so an actor still running is adopted, not started twice."""
        loaded = self.state.load()
        if loaded is None:
            return False
        now = self.clock()
        grace = self.config.grace_s
        # a restored node counts as heard from at the end of the grace minus the
        # timeout: it is declared LOST only if it has not come back by then
        self.state.restore(loaded, heard_at=now + grace - self.config.heartbeat_timeout_s)
        grace_until = now + grace if self.membership.restore() else now  # no node to wait for
        self.placement.restore(grace_until)
        self.jobs.restore(loaded.tables["jobs"])
        log.info("restored %d nodes, %d actors and %d jobs from the state store; waiting up to "
                 "%.1fs for workers to re-register", len(self.nodes), len(self.actors),
                 len(self.jobs.jobs), grace_until - now)
        return True

    # ------------------------------------------------------------------ periodic

    @durable
    def tick(self) -> None:
        """Periodic work: declare silent nodes lost, start actors whose backoff ended."""
        now = self.clock()
        self.membership.lose_silent_nodes(now)
        self.placement.pump_if_due(now)
        self.membership.forget_lost_nodes(now)
        self.jobs.tick(now)

    # ------------------------------------------------------------------ nodes

    @durable
    def register_node(self, req: pb.RegisterNodeRequest) -> pb.RegisterNodeReply:
        """A worker (re)joins. Reconciles the actors it reports with our records."""
        return self.membership.register_node(req)

    @durable
    def connect_node(self, node_id: str, epoch: int) -> NodeRecord:
        """The node's stream is open: it can receive commands now."""
        return self.membership.connect_node(node_id, epoch)

    def disconnect_node(self, node_id: str, epoch: int) -> None:
        self.membership.disconnect_node(node_id, epoch)

    def heartbeat(self, node_id: str, epoch: int) -> None:
        self.membership.heartbeat(node_id, epoch)

    @durable
    def worker_gone(self, node_id: str, epoch: int, reason: str) -> None:
        """The worker of this registration is gone for sure: the node is lost now."""
        self.membership.worker_gone(node_id, epoch, reason)

    @durable
    def drain_node(self, node_id: str, epoch: int, reason: str) -> None:
        """The node's worker got SIGTERM: place nothing more there, move its actors away."""
        self.membership.drain_node(node_id, epoch, reason)

    @durable
    def readmit_node(self, node_id: str) -> NodeRecord:
        """An operator re-admits an EXCLUDED node: its failure count starts again."""
        return self.membership.readmit_node(node_id)

    @durable
    def report(self, node_id: str, epoch: int, r: pb.ActorReport) -> None:
        """A worker tells us what happened to one of its actors."""
        self.failover.report(node_id, epoch, r)

    # ------------------------------------------------------------------ client API

    @durable
    def create_actor(self, spec: pb.ActorSpec, get_if_exists: bool = False) -> ActorRecord:
        """Register a new actor and place it; returns its record (PENDING or STARTING)."""
        return self._create_actor(spec, get_if_exists)

    def _create_actor(self, spec: pb.ActorSpec, get_if_exists: bool = False) -> ActorRecord:
        resources = checked_resources(spec)
        actors, max_actors = self.state.actors, self.config.max_actors
        existing = actors.get(spec.name)
        if existing is not None and existing.state != ActorState.DEAD:
            if get_if_exists:
                return existing
            raise AlreadyExistsError(f"an actor named {spec.name!r} exists already ({existing.state.value})")
        live = sum(1 for r in actors.values() if r.state != ActorState.DEAD)
        if existing is None and len(actors) >= max_actors:
            self.state.forget_dead_actors()
        if live >= max_actors:
            raise ResourceExhaustedError(f"the cluster holds {live} actors; the limit is {max_actors}")
        nodes = self.state.nodes
        if not any(could_ever_fit(n, resources) for n in nodes.values()) and nodes:
            log.info("actor %s needs %s; no node has that much now, it waits", spec.name, resources)
        stored = pb.ActorSpec()
        stored.CopyFrom(spec)
        stored.resources.clear()
        stored.resources.update(resources)
        if stored.max_concurrency == 0:
            stored.max_concurrency = 1
        rec = ActorRecord(spec=stored, incarnation=(existing.incarnation + 1) if existing else 1)
        self.state.put_actor(rec)
        self.state.actor_event(E.EVENT_CREATED, rec)
        self.placement.wait_for_start(rec)
        return rec

    @durable
    def kill_actor(self, name: str, reason: str = "") -> ActorRecord:
        """Stop an actor for good (no restart)."""
        return self._kill_actor(name, reason)

    def _kill_actor(self, name: str, reason: str = "") -> ActorRecord:
        rec = self.get_actor(name)
        if rec.state == ActorState.DEAD:
            return rec
        if rec.node_id:
            self.failover.stop(rec.node_id, name, rec.incarnation, reason or "killed")
        self.failover.mark_dead(rec, f"killed: {reason}" if reason else "killed")
        return rec

    # ------------------------------------------------------------------ jobs (each change durable)

    @durable
    def submit_job(self, req: pb.SubmitJobRequest) -> JobRecord:
        return self.jobs.submit(req)

    @durable
    def scale_job(self, req: pb.ScaleJobRequest) -> JobRecord:
        return self.jobs.scale(req)

    @durable
    def stop_job(self, job_id: str, reason: str = "") -> JobRecord:
        return self.jobs.stop(job_id, reason)

    @durable
    def report_job(self, report: pb.JobReport) -> JobRecord:
        return self.jobs.report(report)

    # ------------------------------------------------------------------ views

    def get_actor(self, name: str) -> ActorRecord:
        rec = self.state.actors.get(name)
        if rec is None:
            raise NotFoundError(f"no actor named {name!r}")
        return rec

    def check_caller(self, caller: str) -> None:
        """Refuse calls from an actor incarnation that has been replaced (fencing)."""
        if "@" not in caller:
            return  # a plain client
        name, _, inc = caller.rpartition("@")
        rec = self.state.actors.get(name)
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
        node = self.state.nodes.get(rec.node_id)
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
