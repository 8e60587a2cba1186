"""Plain records the coordinator keeps for nodes and actors, and their proto views."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum

import msgpack

from ftrl.wire import ftrl_pb2 as pb


class ActorState(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"
    DEAD = "DEAD"

    @property
    def proto(self) -> int:
        return pb.ActorState.Value(f"ACTOR_{self.value}")


class NodeState(StrEnum):
    ALIVE = "ALIVE"
    LOST = "LOST"
    EXCLUDED = "EXCLUDED"
    DRAINING = "DRAINING"

    @property
    def proto(self) -> int:
        return pb.NodeState.Value(f"NODE_{self.value}")


@dataclass
class NodeRecord:
    """What the coordinator knows of one worker node."""

    node_id: str
    session_id: str
    address: str
    resources: dict[str, float]
    slots: int
    epoch: int
    hostname: str = ""
    pid: int = 0
    log_port: int = 0  # its Worker service (actor logs), learned at each registration
    state: NodeState = NodeState.ALIVE
    connected: bool = False
    last_heartbeat: float = field(default_factory=time.monotonic)
    failures: int = 0
    actors: set[str] = field(default_factory=set)
    used: dict[str, float] = field(default_factory=dict)
    pending_stops: dict[str, pb.StopActor] = field(default_factory=dict)  # until it connects
    lost_at: float = 0.0  # monotonic time it was declared lost
    failure_times: list[float] = field(default_factory=list)  # unix times, within the window
    relaunch_pending: bool = False  # the launcher is replacing it: its next session starts clean

    def count_failure(self, window_s: float, now: float | None = None) -> None:
        """One more actor failure on this node; `failures` counts those in the window."""
        self.failure_times.append(time.time() if now is None else now)
        self.expire_failures(window_s, now)

    def expire_failures(self, window_s: float, now: float | None = None) -> None:
        now = time.time() if now is None else now
        times = [t for t in self.failure_times if now - t < window_s]
        self.failure_times = times[-10_000:]
        self.failures = len(self.failure_times)

    def to_row(self) -> bytes:
        """What survives a coordinator restart (not liveness: that is re-learned)."""
        return msgpack.packb({
            "session": self.session_id, "address": self.address, "resources": self.resources,
            "slots": self.slots, "epoch": self.epoch, "hostname": self.hostname, "pid": self.pid,
            "state": self.state.value, "failure_times": self.failure_times,
            "relaunch_pending": self.relaunch_pending,
        })

    @classmethod
    def from_row(cls, node_id: str, row: bytes, now: float) -> NodeRecord:
        d = msgpack.unpackb(row)
        node = cls(node_id=node_id, session_id=d["session"], address=d["address"],
                   resources=dict(d["resources"]), slots=d["slots"], epoch=d["epoch"],
                   hostname=d["hostname"], pid=d["pid"], state=NodeState(d["state"]),
                   last_heartbeat=now, failure_times=list(d["failure_times"]),
                   relaunch_pending=d.get("relaunch_pending", False))
        node.failures = len(node.failure_times)
        if node.state == NodeState.LOST:
            node.lost_at = now
        return node

    def available(self) -> dict[str, float]:
        return {k: v - self.used.get(k, 0.0) for k, v in self.resources.items()}

    def fits(self, need: dict[str, float]) -> bool:
        avail = self.available()
        return all(avail.get(k, 0.0) + 1e-9 >= v for k, v in need.items() if v > 0)

    def reserve(self, name: str, need: dict[str, float]) -> None:
        self.actors.add(name)
        for k, v in need.items():
            self.used[k] = self.used.get(k, 0.0) + v

    def release(self, name: str, need: dict[str, float]) -> None:
        if name not in self.actors:
            return
        self.actors.discard(name)
        for k, v in need.items():
            self.used[k] = max(0.0, self.used.get(k, 0.0) - v)

    def schedulable(self) -> bool:
        return self.state == NodeState.ALIVE and self.connected

    def to_proto(self, now: float | None = None) -> pb.NodeInfo:
        now = time.monotonic() if now is None else now
        return pb.NodeInfo(
            node_id=self.node_id,
            address=self.address,
            state=self.state.proto,
            resources=self.resources,
            available=self.available(),
            slots=self.slots,
            actors=sorted(self.actors),
            failures=self.failures,
            last_heartbeat_age_s=max(0.0, now - self.last_heartbeat),
            epoch=self.epoch,
            hostname=self.hostname,
            pid=self.pid,
            connected=self.connected,
            log_port=self.log_port,
        )


@dataclass
class ActorRecord:
    """What the coordinator knows of one named actor across its incarnations."""

    spec: pb.ActorSpec
    incarnation: int = 1
    state: ActorState = ActorState.PENDING
    node_id: str = ""
    address: str = ""
    pid: int = 0
    restarts: int = 0
    node_epoch: int = 0
    death_reason: str = ""
    error_type: str = ""
    state_since: float = field(default_factory=time.time)
    started_at: float = 0.0  # monotonic time the current incarnation became ALIVE
    crash_streak: int = 0  # deaths in a row that came soon after a start
    start_at: float = 0.0  # monotonic time a delayed (backoff) restart may begin
    ever_alive: bool = False  # some incarnation got as far as serving calls
    local_until: int = 0  # incarnations below this may be used by its node's local restarts
    adopted: bool = False  # learned from a worker's report (no durable record of it)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def resources(self) -> dict[str, float]:
        return dict(self.spec.resources)

    def set_state(self, state: ActorState) -> None:
        if state != self.state:
            self.state = state
            self.state_since = time.time()

    def to_row(self) -> bytes:
        return msgpack.packb({
            "spec": self.spec.SerializeToString(), "incarnation": self.incarnation,
            "state": self.state.value, "node": self.node_id, "address": self.address,
            "pid": self.pid, "restarts": self.restarts, "node_epoch": self.node_epoch,
            "reason": self.death_reason, "error_type": self.error_type,
            "since": self.state_since, "streak": self.crash_streak, "ever_alive": self.ever_alive,
            "local_until": self.local_until,
        })

    @classmethod
    def from_row(cls, row: bytes) -> ActorRecord:
        d = msgpack.unpackb(row)
        spec = pb.ActorSpec()
        spec.ParseFromString(d["spec"])
        return cls(spec=spec, incarnation=d["incarnation"], state=ActorState(d["state"]),
                   node_id=d["node"], address=d["address"], pid=d["pid"], restarts=d["restarts"],
                   node_epoch=d["node_epoch"], death_reason=d["reason"], error_type=d["error_type"],
                   state_since=d["since"], crash_streak=d["streak"], ever_alive=d["ever_alive"],
                   local_until=d["local_until"])

    def to_proto(self) -> pb.ActorInfo:
        return pb.ActorInfo(
            name=self.spec.name,
            class_path=self.spec.class_path,
            node_id=self.node_id,
            address=self.address,
            pid=self.pid,
            state=self.state.proto,
            restarts=self.restarts,
            incarnation=self.incarnation,
            owner=self.spec.owner,
            death_reason=self.death_reason,
            node_epoch=self.node_epoch,
            state_since=self.state_since,
            resources=self.spec.resources,
            max_restarts=self.spec.max_restarts,
            error_type=self.error_type,
        )
