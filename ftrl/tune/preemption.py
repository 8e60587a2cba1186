"""Node loss, as the tuner sees it: a RUNNING trial whose runner or learner waits for a
node that is gone (its node was lost or pre-empted, and no other node has room) for
longer than a grace period is pre-empted. Its job is stopped and it goes back to the
front of the queue, to resume from its newest state when there is room (not a failure).

`LostNodeWatch` holds when each waiting actor was first seen so; it reads the actor and
node dicts `Client.actors()` and `Client.nodes()` return. Imports no torch and no client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ftrl.coordinator.records import ActorState, NodeState

#: How long a trial's actor may wait for a node that is gone before the trial is pre-empted.
LOST_GRACE_S = 1.0
#: The actor states of one waiting for a node (STARTING shows as PENDING outside the coordinator).
WAITING = frozenset({ActorState.PENDING, ActorState.RESTARTING})


def waits_for_a_lost_node(actor: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether `actor` waits (PENDING, RESTARTING) on a node that is not ALIVE, or on none."""
    node = nodes.get(actor.get("node_id") or "")
    return actor["state"] in WAITING and (node is None or node["state"] != NodeState.ALIVE)


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
