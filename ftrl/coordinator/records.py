"""Plain records the coordinator keeps for nodes and actors, and their proto views."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum

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
    state: NodeState = NodeState.ALIVE
    connected: bool = False
    last_heartbeat: float = field(default_factory=time.monotonic)
    failures: int = 0
    actors: set[str] = field(default_factory=set)
    used: dict[str, float] = field(default_factory=dict)
    pending_stops: dict[str, pb.StopActor] = field(default_factory=dict)  # until it connects
    lost_at: float = 0.0  # monotonic time it was declared lost

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
