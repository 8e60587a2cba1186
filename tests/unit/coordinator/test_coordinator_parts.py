"""The coordinator's parts, each built alone from its constructor (no Controller): the
cluster state over a store, the pure node choice, the start queue, failover."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ftrl.coordinator.failover import Failover
from ftrl.coordinator.placement import LOCAL_RESTART_RANGE, Placement, choose_node
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.settings import ControllerConfig
from ftrl.coordinator.state import ClusterState
from ftrl.coordinator.store import MemoryStore, SQLiteStore
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import StaleIncarnationError


def node(node_id: str, cpu: float = 2.0, connected: bool = True, **fields) -> NodeRecord:
    return NodeRecord(node_id=node_id, session_id=f"s-{node_id}", address="127.0.0.1",
                      resources={"cpu": cpu}, slots=int(cpu), epoch=7, connected=connected, **fields)


def actor(name: str, cpu: float = 1.0, max_restarts: int = -1, **fields) -> ActorRecord:
    spec = pb.ActorSpec(name=name, class_path="tests.actors:Counter", resources={"cpu": cpu},
                        max_restarts=max_restarts, max_concurrency=1)
    return ActorRecord(spec=spec, **fields)


@dataclass
class Outbox:
    """A fake `send`: nodes in `up` take messages."""

    up: set[str] = field(default_factory=set)
    sent: list[tuple[str, pb.CoordinatorMessage]] = field(default_factory=list)

    def __call__(self, node_id: str, msg: pb.CoordinatorMessage) -> bool:
        if node_id not in self.up:
            return False
        self.sent.append((node_id, msg))
        return True


# ---------------------------------------------------------------- choose_node (pure)

def test_choose_node_takes_the_most_free_cpu_then_the_fewest_actors():
    busy, idle, small = node("busy", cpu=4), node("idle", cpu=4), node("small", cpu=1)
    busy.reserve("x", {"cpu": 2})
    assert choose_node([busy, idle, small], {"cpu": 1}) is idle
    idle.reserve("y", {"cpu": 2})  # same free CPU as busy, one more actor each: the first wins
    assert choose_node([busy, idle, small], {"cpu": 1}) is busy
    idle.reserve("z", {"cpu": 0})
    assert choose_node([idle, busy], {"cpu": 1}) is busy  # fewer actors


def test_choose_node_skips_nodes_without_room_or_not_schedulable():
    full, cut, draining = node("full", cpu=1), node("cut", connected=False), node("d", state=NodeState.DRAINING)
    full.reserve("x", {"cpu": 1})
    assert choose_node([full, cut, draining], {"cpu": 1}) is None
    assert choose_node([full, cut, draining, node("ok")], {"cpu": 2}).node_id == "ok"


# ---------------------------------------------------------------- ClusterState

def test_state_writes_what_changed_in_one_commit_and_nothing_otherwise():
    store = MemoryStore()
    changed: list[str] = []
    state = ClusterState(store, changed=lambda rec: changed.append(rec.name))
    state.put_node(node("a"))
    rec = actor("x")
    state.put_actor(rec)
    state.actor_event(pb.EVENT_CREATED, rec)
    state.flush()
    assert store.commits == 1 and changed == ["x"]
    state.flush()  # nothing changed
    assert store.commits == 1
    loaded = store.load()
    assert set(loaded.tables["actors"]) == {"x"} and set(loaded.tables["nodes"]) == {"a"}
    assert int.from_bytes(loaded.meta["event_seq"], "big") == 1


def test_state_restores_records_and_counters_from_its_store(tmp_path):
    # a durable store: its epoch counter goes on from the stored one (a memory store's
    # floor is the wall clock, which moves on between two epochs)
    store = SQLiteStore(tmp_path)
    old = ClusterState(store)
    old.put_node(node("a"))
    epoch = old.next_epoch()
    rec = actor("x")
    old.put_actor(rec)
    old.actor_event(pb.EVENT_CREATED, rec)
    old.flush()
    new = ClusterState(store)
    loaded = new.load()
    assert loaded is not None
    new.restore(loaded, heard_at=123.0)
    assert new.actors["x"].spec == rec.spec and new.nodes["a"].last_heartbeat == 123.0
    assert new.events.seq == 1 and new.next_epoch() == epoch + 1
    store.close()
    assert ClusterState(MemoryStore()).load() is None


def test_state_refuses_a_stale_or_lost_registration():
    state = ClusterState(MemoryStore())
    state.put_node(node("a"))
    assert state.live_node("a", 7).node_id == "a"
    with pytest.raises(StaleIncarnationError):
        state.live_node("a", 6)
    state.nodes["a"].state = NodeState.LOST
    with pytest.raises(StaleIncarnationError):
        state.live_node("a", 7)


# ---------------------------------------------------------------- Placement

def make_placement(now: list[float]) -> tuple[ClusterState, Placement, Outbox]:
    state, send = ClusterState(MemoryStore()), Outbox()
    return state, Placement(state, send=send, clock=lambda: now[0]), send


def test_a_waiting_actor_starts_once_a_node_takes_the_message():
    now = [0.0]
    state, placement, send = make_placement(now)
    state.put_node(node("a"))
    rec = actor("x")
    state.put_actor(rec)
    placement.wait_for_start(rec)  # the node's stream is not open: the send fails
    assert placement.is_waiting("x") and rec.state == ActorState.PENDING
    send.up.add("a")
    placement.pump_if_due(now[0])  # the failed send asked for a retry
    assert not placement.is_waiting("x") and rec.state == ActorState.STARTING
    [(node_id, msg)] = send.sent
    assert (node_id, msg.start.incarnation, msg.start.local_until) == ("a", 1, 1 + LOCAL_RESTART_RANGE)
    assert state.nodes["a"].actors == {"x"}


def test_nothing_starts_before_the_grace_ends():
    now = [100.0]
    state, placement, send = make_placement(now)
    state.put_node(node("a"))
    send.up.add("a")
    rec = actor("x")
    state.put_actor(rec)
    placement.restore(grace_until=110.0)
    assert placement.is_waiting("x")
    now[0] = 105.0
    placement.pump_if_due(now[0])  # not due: nothing changed and the wake-up is at 110
    placement.pump()
    assert send.sent == []
    placement.end_grace(now[0])
    placement.pump_if_due(now[0])
    assert [m.start.spec.name for _, m in send.sent] == ["x"]


# ---------------------------------------------------------------- Failover

@dataclass
class Launcher:
    calls: list[str] = field(default_factory=list)

    def relaunch(self, node: NodeRecord, reason: str) -> bool:
        self.calls.append(node.node_id)
        return True


def make_failover(**config) -> tuple[ClusterState, Failover, Outbox, Launcher]:
    state, send, launcher = ClusterState(MemoryStore()), Outbox({"a", "b"}), Launcher()
    placement = Placement(state, send=send, clock=lambda: 0.0)
    failover = Failover(state, placement, ControllerConfig(**config), send=send, clock=lambda: 0.0,
                        launcher=launcher)
    for node_id in ("a", "b"):
        state.put_node(node(node_id))
    return state, failover, send, launcher


def started(state: ClusterState, name: str, node_id: str, **fields) -> ActorRecord:
    rec = actor(name, **fields)
    rec.node_id, rec.state = node_id, ActorState.ALIVE
    state.nodes[node_id].reserve(name, rec.resources)
    state.put_actor(rec)
    return rec


def test_a_failed_actor_restarts_in_place_while_it_has_restarts_then_is_dead():
    state, failover, send, _ = make_failover()
    rec = started(state, "x", "a", max_restarts=1)
    failover.actor_failed(rec, "boom")
    assert (rec.state, rec.restarts, rec.incarnation, rec.node_id) == (ActorState.RESTARTING, 1, 2, "a")
    assert [(n, m.start.incarnation) for n, m in send.sent] == [("a", 2)]
    failover.actor_failed(rec, "boom again")
    assert rec.state == ActorState.DEAD and "no restarts left (max_restarts=1)" in rec.death_reason
    assert "x" not in state.nodes["a"].actors


def test_a_node_over_its_failure_limit_is_excluded_and_its_actors_move():
    state, failover, send, launcher = make_failover(max_node_failures=1)
    x, y = started(state, "x", "a"), started(state, "y", "a")
    failover.actor_failed(x, "boom")
    assert state.nodes["a"].state == NodeState.ALIVE
    failover.actor_failed(x, "boom")  # 2 failures > 1
    assert state.nodes["a"].state == NodeState.EXCLUDED and launcher.calls == ["a"]
    assert (x.node_id, y.node_id) == ("b", "b") and y.incarnation > 1
    assert any(m.stop.fenced and m.stop.name == "y" for n, m in send.sent if n == "a" and m.HasField("stop"))
