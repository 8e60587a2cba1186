"""The coordinator's brain: membership, actor registry, placement and failover policy.

`Controller` is put together from one part per job, each in its own module:
`state` (records and the durable store), `membership` (nodes), `placement` (where
and when actors start), `failover` (actor deaths, the restart policy); the client API
and the periodic tick are here, jobs in `jobs` and learner meshes in `rendezvous`.

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

import logging
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ftrl._version import __version__
from ftrl.coordinator.events import EventLog
from ftrl.coordinator.failover import MAX_INCARNATION, Failover
from ftrl.coordinator.jobs import JobHost, JobTable
from ftrl.coordinator.launcher import LoggingLauncher, NodeLauncher
from ftrl.coordinator.membership import MAX_RUNNING_REPORTED, Membership, check_running
from ftrl.coordinator.placement import LOCAL_RESTART_RANGE, Placement
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.rendezvous import MeshRegistry
from ftrl.coordinator.state import ClusterState, durable
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
    MAX_ACTORS,
    MAX_KWARGS_BYTES,
    check_class_path,
    check_name,
    check_resources,
)

log = logging.getLogger(__name__)

E = pb.EventType
DEFAULT_RESOURCES = {"cpu": 1.0}
__all__ = ["LOCAL_RESTART_RANGE", "MAX_INCARNATION", "MAX_RUNNING_REPORTED", "Controller",
           "ControllerConfig", "check_running", "durable"]


@dataclass
class ControllerConfig:
    """Coordinator policy knobs."""

    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    max_node_failures: int = 100  # -1: never exclude a node
    restart_backoff_base_s: float = 0.1
    restart_backoff_cap_s: float = 2.0
    quick_crash_s: float = 1.0  # a death sooner than this after start counts as a crash loop
    adopt_unknown_actors: bool = True  # nothing restored: trust what workers report
    lost_node_retention_s: float = 3600.0  # forget an empty LOST node after this long
    max_actors: int = MAX_ACTORS
    node_failure_window_s: float = 3600.0  # max_node_failures counts failures this recent
    restart_grace_s: float | None = None  # after a restart, wait up to this long for workers (None: max(10 s, 2 timeouts))
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


class Controller(ClusterState, Membership, Placement, Failover):
    """Cluster state plus the failover policy; see the module docstring."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        send: Send | None = None,
        launcher: NodeLauncher | None = None,
        clock: Callable[[], float] = time.monotonic,
        store: MemoryStore | SQLiteStore | None = None,
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
        self._dirty_actors: set[str] = set()
        self._dirty_nodes: set[str] = set()
        self._saved_meta: dict[str, int] = {}
        self._grace_until = 0.0
        self._awaited: set[str] = set()  # restored nodes not registered again yet
        self.jobs = JobTable(JobHost(
            actors=self.actors, events=self.events,
            get_or_create_actor=lambda spec: self._create_actor(spec, get_if_exists=True),
            kill_actor=self._kill_actor,
            unhealthy_timeout_s=lambda: self.config.job_unhealthy_timeout_s))
        self.restored = self._restore()
        # Records restored: an actor we have no record of is a leftover, stopped. Nothing
        # restored (no state dir, a new one, or --recover): what workers report is the
        # truth, adopted (a running job comes back from its driver's spec).
        self.adopt_unknown = self.config.adopt_unknown_actors and not self.restored

    # ------------------------------------------------------------------ helpers

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

    # ------------------------------------------------------------------ actor lifecycle

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
