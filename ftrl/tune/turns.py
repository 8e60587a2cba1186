"""Time-shared PBT populations (Tune's rule): when trials wait for room (the cluster's, or
`max_concurrent_trials`), a running trial at its perturbation point yields its room to the
waiting trial furthest behind it in `time_attr`. It stops with a checkpoint and shows
PAUSED (`PAUSED_TO_YIELD`) until its turn comes: the waiting trials start furthest behind
first (`ftrl.tune.placement.start_order`). Every member advances, and the spread of
`time_attr` across the population stays within about one perturbation interval. A paused
member donates its newest checkpoint; it is never a target. A pure function, tested
without a cluster; the tuner (ftrl.tune.controller) applies its answer. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ftrl.tune.experiment import Trial
from ftrl.tune.placement import fits, trial_resources


def yields(at_point: Collection[Trial], waiting: list[Trial], times: Mapping[str, float],
           free: Mapping[str, float]) -> list[tuple[Trial, Trial]]:
    """Which running trials at their perturbation point yield, and to whom: (yielding,
    waiting) pairs. The one furthest ahead yields first, to the waiting trial furthest
    behind it (`waiting` in start order) that is strictly behind it and fits in the room
    it frees (with `free`, the room left now); each waiting trial is taken once."""
    room = dict(free)
    left = list(waiting)
    out: list[tuple[Trial, Trial]] = []
    for trial in sorted(at_point, key=lambda t: (-times.get(t.trial_id, 0.0), t.trial_id)):
        freed = dict(room)
        for key, amount in trial_resources(trial).items():
            freed[key] = freed.get(key, 0.0) + amount
        ahead = times.get(trial.trial_id, 0.0)
        behind = next((w for w in left if times.get(w.trial_id, 0.0) < ahead
                       and fits(trial_resources(w), freed)), None)
        if behind is None:
            continue
        left.remove(behind)
        for key, amount in trial_resources(behind).items():
            freed[key] = freed.get(key, 0.0) - amount
        room = freed
        out.append((trial, behind))
    return out
