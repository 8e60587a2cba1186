"""ftrl.tune.preemption: which of a trial's actors wait for a lost node, past a grace period."""

from __future__ import annotations

from ftrl.tune.preemption import LostNodeWatch, waits_for_a_lost_node

NODES = {"up": {"state": "ALIVE"}, "lost": {"state": "LOST"}, "draining": {"state": "DRAINING"}}


def actor(name: str, state: str, node_id: str = "") -> dict:
    return {"name": name, "state": state, "node_id": node_id}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_what_waits_for_a_lost_node():
    assert waits_for_a_lost_node(actor("t/env_runner/0", "RESTARTING", "lost"), NODES)
    assert waits_for_a_lost_node(actor("t/env_runner/0", "PENDING", "draining"), NODES)
    assert waits_for_a_lost_node(actor("t/learner/0", "PENDING"), NODES)  # no node has room
    assert waits_for_a_lost_node(actor("t/learner/0", "PENDING", "forgotten"), NODES)
    assert not waits_for_a_lost_node(actor("t/env_runner/0", "PENDING", "up"), NODES)  # starting
    assert not waits_for_a_lost_node(actor("t/env_runner/0", "ALIVE", "lost"), NODES)  # not waiting (yet)
    assert not waits_for_a_lost_node(actor("t/env_runner/0", "DEAD", "lost"), NODES)


def test_an_actor_is_stranded_after_the_grace_period_and_its_clock_restarts_when_it_is_placed():
    clock = Clock()
    watch = LostNodeWatch(grace_s=1.0, clock=clock)
    waiting = [actor("t/env_runner/0", "RESTARTING", "lost"), actor("t/algorithm", "ALIVE", "up")]
    assert watch.stranded(waiting, NODES) == []  # first seen now
    clock.now += 0.5
    assert watch.stranded(waiting, NODES) == []
    clock.now += 0.5
    assert watch.stranded(waiting, NODES) == ["t/env_runner/0"]
    placed = [actor("t/env_runner/0", "ALIVE", "up")]
    assert watch.stranded(placed, NODES) == []
    clock.now += 5
    assert watch.stranded(waiting, NODES) == []  # waiting again: a new grace period
    clock.now += 1
    assert watch.stranded(waiting, NODES) == ["t/env_runner/0"]
