"""ftrl.tune.preemption: which of a trial's actors wait for a lost node, past a grace period."""

from __future__ import annotations

from ftrl.tune.preemption import LostNodeWatch, role_of, waits_for_a_lost_node, why_it_cannot_train

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
    assert waits_for_a_lost_node(actor("t/learner/0", "RESTARTING"), NODES)  # moved off, no room elsewhere
    assert not waits_for_a_lost_node(actor("t/algorithm", "PENDING"), NODES)  # never placed: waits for room
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


def test_a_trial_is_pre_empted_only_when_it_cannot_train():
    def trial(*names: str) -> list[dict]:
        return [actor(f"t/{n}", "ALIVE", "up") for n in names]

    actors = trial("algorithm", "env_runner/0", "env_runner/1", "eval_runner/0", "learner/0", "learner/1")
    assert why_it_cannot_train(actors, {"t/env_runner/0"}, min_learners=1) is None  # trains on with one
    assert why_it_cannot_train(actors, {"t/eval_runner/0"}, min_learners=1) is None  # evaluation waits
    assert why_it_cannot_train(actors, {"t/learner/1"}, min_learners=1) is None
    assert "every env runner (2)" in why_it_cannot_train(actors, {"t/env_runner/0", "t/env_runner/1"}, 1)
    assert "driver" in why_it_cannot_train(actors, {"t/algorithm"}, 1)
    assert "1 of 2 learners left, fewer than min_learners=2" in why_it_cannot_train(actors, {"t/learner/0"}, 2)
    assert "0 of 2 learners" in why_it_cannot_train(actors, {"t/learner/0", "t/learner/1"}, 1)
    gone = [*trial("algorithm", "env_runner/1"), actor("t/env_runner/0", "DEAD", "lost")]
    assert "every env runner (1)" in why_it_cannot_train(gone, {"t/env_runner/1"}, 1)  # a dead one is no runner
    assert why_it_cannot_train(trial("algorithm"), set(), 1) is None  # it samples in its driver
    assert role_of("t/env_runner/3") == "env_runner" and role_of("t/algorithm") == "algorithm"


def test_a_requeued_trial_s_clocks_start_afresh():
    clock = Clock()
    watch = LostNodeWatch(grace_s=1.0, clock=clock)
    waiting = [actor("t/env_runner/0", "RESTARTING", "lost"), actor("u/env_runner/0", "RESTARTING", "lost")]
    watch.stranded(waiting, NODES)
    clock.now += 2
    watch.forget("t")
    assert watch.stranded(waiting, NODES) == ["u/env_runner/0"]  # t's clock started again
