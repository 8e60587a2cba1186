"""Which PENDING trials start now: pure functions over the cluster's views (the node and
actor dicts `Client.nodes()` and `Client.actors()` return), tested without a cluster.

A trial holds its resources (`Trial.resources`: what its driver, runners and learners
take: CPUs, GPUs and custom resources) whole while it runs, whether or not its actors
exist yet. Room is what the ALIVE nodes have (every kind they advertise) minus what this
experiment's RUNNING trials hold and what every other live actor holds (other jobs', and
a stopping trial's until its actors are gone). Trials start in queue order (those that
ran before first: pre-empted, failed or paused ones go back to the front), while the
front one fits and fewer than max_concurrent_trials run; the front of the queue waits
for room, none jumps it.
Imports no torch and no client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ftrl.coordinator.records import ActorState, NodeState
from ftrl.tune.experiment import PAUSED_TO_YIELD, Trial, TrialStatus

#: The resource kinds every room has (0 when no node offers them).
RESOURCE_KINDS = ("cpu", "gpu")
_EPS = 1e-9


def trial_resources(trial: Trial) -> dict[str, float]:
    """What a trial holds while it runs (computed once, from its config, by the Tuner)."""
    return dict(trial.resources or {"cpu": 1.0})


def start_order(trials: Iterable[Trial], times: Mapping[str, float] | None = None) -> list[Trial]:
    """The waiting trials in the order they start. FIFO (`times` None): the PENDING ones,
    those that ran before first, then by when they were queued, then by index. A
    time-shared PBT population (`times`: each trial's time_attr): the PENDING ones and those
    PAUSED to yield their turn, the one furthest behind first (Tune's rule), then as FIFO."""
    if times is None:
        pending = (t for t in trials if t.status == TrialStatus.PENDING)
        return sorted(pending, key=lambda t: (t.started_at is None, t.queued_at, t.index))
    waiting = (t for t in trials if t.status == TrialStatus.PENDING
               or (t.status == TrialStatus.PAUSED and t.paused_because == PAUSED_TO_YIELD))
    return sorted(waiting, key=lambda t: (times.get(t.trial_id, 0.0), t.started_at is None, t.queued_at, t.index))


def owner_of(actor_name: str) -> str:
    """The job (a trial id, for a trial's actors) an actor belongs to: its name up to the first '/'."""
    return actor_name.split("/", 1)[0]


def free_resources(nodes: Mapping[str, Mapping[str, Any]], actors: Iterable[Mapping[str, Any]],
                   running: Iterable[Trial]) -> dict[str, float]:
    """Every resource kind of the ALIVE nodes not held by the `running` trials (counted
    whole) nor by any other live actor on them: other jobs', and those of this
    experiment's trials that are not running but still stop (a member that yielded its
    turn holds its room until its actors are gone: the next one starting into that room
    would only wait for it)."""
    running = list(running)
    alive = {nid for nid, node in nodes.items() if node["state"] == NodeState.ALIVE}
    free = dict.fromkeys(RESOURCE_KINDS, 0.0)
    for nid in alive:
        for key, amount in nodes[nid].get("resources", {}).items():
            free[key] = free.get(key, 0.0) + float(amount)
    running_ids = {t.trial_id for t in running}
    for actor in actors:
        if owner_of(actor["name"]) in running_ids or actor["state"] == ActorState.DEAD:
            continue
        if actor.get("node_id") not in alive:
            continue
        for key, amount in (actor.get("resources") or {}).items():
            free[key] = free.get(key, 0.0) - float(amount)
    for trial in running:
        for key, value in trial_resources(trial).items():
            free[key] = free.get(key, 0.0) - value
    return free


def fits(need: Mapping[str, float], free: Mapping[str, float]) -> bool:
    """Whether `need` fits in `free` (a kind `free` lacks has none)."""
    return all(need.get(k, 0.0) <= free.get(k, 0.0) + _EPS for k in need)


def to_start(queue: Iterable[Trial], free: Mapping[str, float], num_running: int,
             max_concurrent: int | None) -> list[Trial]:
    """The trials of `queue` (in `start_order`) that start now: the longest front of the
    queue that fits in `free`, one after the other, while fewer than `max_concurrent`
    (None or 0: no cap) run. The caller starts them in this order and stops at the first
    that does not start."""
    room = dict(free)
    out: list[Trial] = []
    for trial in queue:
        if max_concurrent and num_running + len(out) >= int(max_concurrent):
            break
        need = trial_resources(trial)
        if not fits(need, room):
            break  # the front of the queue waits for room: none jumps it
        for key, value in need.items():
            room[key] = room.get(key, 0.0) - value
        out.append(trial)
    return out
