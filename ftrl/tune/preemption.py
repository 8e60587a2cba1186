"""Node loss, as the tuner sees it. A trial's actor that waits for a node that is gone
(its node was lost or pre-empted, and no other node has room) for longer than a grace
period is stranded. A trial trains on with what it has left, as a job outside tune does
(elastic trials): it keeps its reservation, and its stranded actors come back when room
returns. It is pre-empted only when it cannot train at all (`why_it_cannot_train`): its
driver stranded, every env runner stranded, or fewer learners left than `min_learners`.
Then its job is stopped and it goes back to the front of the queue, to resume from its
newest state when there is room (not a failure).

`LostNodeWatch` holds when each waiting actor was first seen so; it reads the actor and
node dicts `Client.actors()` and `Client.nodes()` return. Imports no torch and no client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ftrl.coordinator.records import ActorState, NodeState

#: How long a trial's actor may wait for a node that is gone before the trial is pre-empted.
LOST_GRACE_S = 1.0
#: The actor states of one waiting for a node (STARTING shows as PENDING outside the coordinator).
WAITING = frozenset({ActorState.PENDING, ActorState.RESTARTING})


def waits_for_a_lost_node(actor: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether `actor` waits (PENDING, RESTARTING) on a node that is not ALIVE, or is
    RESTARTING on none (moved off a lost node, no room elsewhere). A PENDING actor on no
    node was never placed: it waits for room (a trial started in the room another frees),
    not for a lost node."""
    if actor["state"] not in WAITING:
        return False
    node_id = actor.get("node_id") or ""
    if not node_id:
        return actor["state"] == ActorState.RESTARTING
    node = nodes.get(node_id)
    return node is None or node["state"] != NodeState.ALIVE


def role_of(actor_name: str) -> str:
    """A trial's actor's role from its name (`TRIAL/algorithm`: the driver; `TRIAL/env_runner/I`,
    `TRIAL/eval_runner/I`, `TRIAL/learner/I`): "algorithm", "env_runner", "eval_runner", "learner"."""
    parts = actor_name.split("/")
    return parts[1] if len(parts) > 1 else ""


def why_it_cannot_train(actors: Iterable[Mapping[str, Any]], stranded: Collection[str],
                        min_learners: int) -> str | None:
    """Why a trial with these `actors` (its live ones), of which `stranded` wait for a lost
    node, cannot train at all; None when it trains on with the rest (a stranded
    evaluation runner never stops it: evaluation waits)."""
    by_role: dict[str, list[str]] = {}
    for actor in actors:
        if actor.get("state") != ActorState.DEAD:
            by_role.setdefault(role_of(actor["name"]), []).append(actor["name"])
    if any(name in stranded for name in by_role.get("algorithm", [])):
        return "its driver waits for a lost node"
    runners = by_role.get("env_runner", [])
    if runners and all(name in stranded for name in runners):
        return f"every env runner ({len(runners)}) waits for a lost node"
    learners = by_role.get("learner", [])
    left = sum(name not in stranded for name in learners)
    if learners and left < max(1, int(min_learners)):
        return f"{left} of {len(learners)} learners left, fewer than min_learners={min_learners}"
    return None


class LostNodeWatch:
    """When each actor was first seen waiting for a lost node, by actor name.

    Args:
        grace_s: how long an actor may wait so before it counts as stranded.
        clock: monotonic seconds (a fake one in tests).
    """

    def __init__(self, grace_s: float = LOST_GRACE_S, clock: Callable[[], float] = time.monotonic):
        self.grace_s = grace_s
        self._clock = clock
        self._waiting_since: dict[str, float] = {}

    def stranded(self, actors: Iterable[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """The names of `actors` (one trial's) that have waited for a lost node for at
        least `grace_s`; an actor seen otherwise starts its clock afresh next time."""
        now = self._clock()
        out = []
        for actor in actors:
            name = actor["name"]
            if waits_for_a_lost_node(actor, nodes):
                since = self._waiting_since.setdefault(name, now)
                if now - since >= self.grace_s:
                    out.append(name)
            else:
                self._waiting_since.pop(name, None)
        return out

    def forget(self, trial_id: str) -> None:
        """A trial's job was stopped: its actors' clocks go (a new run starts them afresh)."""
        for name in [n for n in self._waiting_since if n.split("/", 1)[0] == trial_id]:
            del self._waiting_since[name]
