"""The coordinator's event log: numbering, filters, replay, and dropping slow watchers."""

from __future__ import annotations

from ftrl.coordinator import events as events_mod
from ftrl.coordinator.events import RETAINED_EVENTS, SUBSCRIBER_QUEUE, EventLog
from ftrl.wire import ftrl_pb2 as pb


def _drain(sub) -> list:
    out = []
    while not sub.queue.empty():
        out.append(sub.queue.get_nowait())
    return out


def test_filters_by_prefix_and_node_events():
    log = EventLog()
    actors_only = log.subscribe(prefix="job/")
    with_nodes = log.subscribe(prefix="job/", nodes=True)
    everything = log.subscribe(nodes=True)
    log.emit(pb.EVENT_ALIVE, "job/a", "n1", 1)
    log.emit(pb.EVENT_ALIVE, "other", "n1", 1)
    log.emit(pb.EVENT_NODE_LOST, node_id="n1", message="gone")
    assert [e.actor for e in _drain(actors_only)] == ["job/a"]
    assert [(e.actor, e.type) for e in _drain(with_nodes)] == [
        ("job/a", pb.EVENT_ALIVE), ("", pb.EVENT_NODE_LOST)]
    assert [e.seq for e in _drain(everything)] == [1, 2, 3]


def test_replay_after_seq_and_unsubscribe():
    log = EventLog()
    for i in range(5):
        log.emit(pb.EVENT_CREATED, f"a{i}")
    sub = log.subscribe(after_seq=3)
    assert [e.actor for e in _drain(sub)] == ["a3", "a4"]
    assert _drain(log.subscribe()) == []  # -1: nothing replayed
    log.unsubscribe(sub)
    log.emit(pb.EVENT_CREATED, "late")
    assert _drain(sub) == []


def test_retention_is_bounded():
    log = EventLog()
    for _ in range(RETAINED_EVENTS + 10):
        log.emit(pb.EVENT_CREATED, "a")
    assert log.seq == RETAINED_EVENTS + 10
    assert len(log.recent(10 * RETAINED_EVENTS)) == RETAINED_EVENTS
    assert log.recent(3)[-1].seq == log.seq


def test_slow_subscriber_is_dropped_with_a_marker():
    log = EventLog()
    slow = log.subscribe()
    fast = log.subscribe()
    for i in range(SUBSCRIBER_QUEUE + 1):
        log.emit(pb.EVENT_CREATED, f"a{i}")
        if not fast.queue.empty():
            fast.queue.get_nowait()
    assert slow.overflowed and not fast.overflowed
    assert slow.queue.qsize() == 1 and slow.queue.get_nowait() is None
    log.emit(pb.EVENT_CREATED, "after")
    assert slow.queue.empty()  # no longer fed
    assert fast.queue.get_nowait().actor == "after"


def test_replay_never_overfills_a_queue(monkeypatch):
    monkeypatch.setattr(events_mod, "SUBSCRIBER_QUEUE", 5)
    log = EventLog()
    for i in range(20):
        log.emit(pb.EVENT_CREATED, f"a{i}")
    sub = log.subscribe(after_seq=0)
    assert [e.actor for e in _drain(sub)] == [f"a{i}" for i in range(5)]

