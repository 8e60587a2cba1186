"""Placement: which node an actor goes to (`choose_node`, a pure function of the nodes),
and when the actors waiting to start are started there (`Placement`, the start queue).

An actor waits (PENDING or RESTARTING) until its backoff has passed, a node has room,
and, after a coordinator restart, the grace period for workers to come back has ended;
then StartActor goes to its node and the resources are reserved there.
"""

from __future__ import annotations

from collections.abc import Iterable

from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.settings import Clock, Send
from ftrl.coordinator.state import ClusterState
from ftrl.wire import ftrl_pb2 as pb

#: How many incarnations a worker may use for local restarts before asking again.
LOCAL_RESTART_RANGE = 1000


#: ActorSpec.placement_strategy: "" (most free CPU), or among the actors of one role
PLACEMENT_STRATEGIES = ("", "PACK", "SPREAD")


def role_of(actor_name: str) -> str:
    """An actor's role: its name up to the last '/' ("job/env_runner" of "job/env_runner/3")."""
    return actor_name.rpartition("/")[0]


def choose_node(nodes: Iterable[NodeRecord], need: dict[str, float], name: str = "",
                strategy: str = "") -> NodeRecord | None:
    """The node to start actor `name` that needs `need` on, of the schedulable nodes with
    room: by `strategy` among the actors of its role (`role_of`), "PACK" the node holding
    most of them, then the least free CPU (each role on as few nodes as its resources
    allow), "SPREAD" the node holding fewest, then the most free CPU; "" the node with the
    most free CPU. Ties: the fewest actors, then the first."""
    role = role_of(name) if strategy else ""
    best: NodeRecord | None = None
    best_key: tuple[float, float, int] | None = None
    for node in nodes:
        if not node.schedulable() or not node.fits(need):
            continue
        free_cpu = node.available().get("cpu", 0.0)
        peers = sum(1 for a in node.actors if a != name and role_of(a) == role) if role else 0
        if strategy == "PACK":
            key = (-peers, free_cpu, len(node.actors))
        elif strategy == "SPREAD":
            key = (peers, -free_cpu, len(node.actors))
        else:
            key = (0, -free_cpu, len(node.actors))
        if best_key is None or key < best_key:
            best, best_key = node, key
    return best


def could_ever_fit(node: NodeRecord, need: dict[str, float]) -> bool:
    """Whether `node` has that much of each resource at all (used or not)."""
    return all(node.resources.get(k, 0.0) >= v for k, v in need.items() if v > 0)


class Placement:
    """The actors waiting to start, and starting them when a node has room."""

    def __init__(self, state: ClusterState, send: Send, clock: Clock) -> None:
        self._state = state
        self._send = send
        self._clock = clock
        self._waiting: set[str] = set()  # actors to start or place
        self._dirty = False  # capacity changed since the last pump
        self._wake_at = float("inf")  # when the next backoff of a waiting actor ends
        self._grace_until = 0.0  # after a restart: nothing starts before this

    def restore(self, grace_until: float) -> None:
        """After the records were restored: reserve what each live actor holds on its
        node, queue those waiting to start, and start nothing before `grace_until`."""
        nodes = self._state.nodes
        for rec in self._state.actors.values():
            node = nodes.get(rec.node_id)
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
        self._grace_until = grace_until
        self._wake_at = grace_until

    def end_grace(self, now: float) -> None:
        """Every restored node is back: no need to wait any longer."""
        self._grace_until = now
        self.capacity_changed()

    def capacity_changed(self) -> None:
        """Resources were freed or nodes came or went: waiting actors may fit now."""
        self._dirty = True

    def is_waiting(self, name: str) -> bool:
        """Whether a start of `name` is queued (and not sent yet)."""
        return name in self._waiting

    def forget(self, name: str) -> None:
        """`name` will not start again (it is DEAD)."""
        self._waiting.discard(name)

    def wait_for_start(self, rec: ActorRecord) -> None:
        """Queue `rec` to be started (now, or after its backoff)."""
        self._waiting.add(rec.name)
        self._try_start(rec)

    def pump_if_due(self, now: float) -> None:
        """Pump if capacity changed since the last pump or a backoff has ended."""
        if self._dirty or now >= self._wake_at:
            self.pump()

    def pump(self) -> None:
        """Start every waiting actor whose backoff has passed and that has a node.

        Cheap when nothing can change: the tick runs it only after capacity changed or
        when a backoff ends, and one pump tries each resource shape that found no
        node only once (thousands of unplaceable actors cost one scan, not one each).
        """
        self._dirty = False
        self._wake_at = float("inf")
        if not self._waiting:
            return
        now = self._clock()
        no_room: set[tuple] = set()
        actors = self._state.actors
        for name in sorted(self._waiting):
            rec = actors.get(name)
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
        if start_at > self._clock():
            self._wake_at = min(self._wake_at, start_at)
            return False
        nodes = self._state.nodes
        node = nodes.get(rec.node_id) if rec.node_id else None
        if node is None or not node.schedulable() or rec.name not in node.actors:
            if node is not None:
                node.release(rec.name, rec.resources)
            shape = tuple(sorted(rec.spec.resources.items()))
            if no_room is not None and shape in no_room:
                return False
            node = choose_node(nodes.values(), rec.resources, rec.name, rec.spec.placement_strategy)
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
        if not self._send(node.node_id, msg):
            self._dirty = True  # retry on the next tick
            return False
        rec.node_epoch = node.epoch
        rec.local_until = local_until
        self._waiting.discard(rec.name)
        if rec.state == ActorState.PENDING:
            rec.set_state(ActorState.STARTING)
        self._state.actor_changed(rec)
        return True
