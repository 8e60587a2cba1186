"""ftrl.tune.turns: which running trials at a perturbation point yield their room, and to
whom (Tune's time-sharing), from plain trials; and the waiting trials' start order."""

from __future__ import annotations

from ftrl.tune.experiment import PAUSED_STOPPED, PAUSED_TO_YIELD, Trial, TrialStatus
from ftrl.tune.placement import start_order
from ftrl.tune.turns import yields


def trial(i: int, status: TrialStatus = TrialStatus.RUNNING, cpu: float = 2.0, paused_because: str = "",
          queued_at: float = 0.0) -> Trial:
    return Trial(f"t{i}", i, {}, {}, f"/x/t{i}", status=status, resources={"cpu": cpu, "gpu": 0.0},
                 paused_because=paused_because, queued_at=queued_at)


def test_the_one_furthest_ahead_yields_to_the_one_furthest_behind():
    running = [trial(0), trial(1)]
    waiting = [trial(2, TrialStatus.PENDING), trial(3, TrialStatus.PENDING)]
    times = {"t0": 10.0, "t1": 20.0, "t2": 0.0, "t3": 5.0}
    pairs = yields(running, waiting, times, {"cpu": 0.0, "gpu": 0.0})
    assert [(a.trial_id, b.trial_id) for a, b in pairs] == [("t1", "t2"), ("t0", "t3")]


def test_nobody_yields_to_a_trial_not_behind_it_or_too_big_for_its_room():
    times = {"t0": 10.0, "t2": 10.0}
    assert yields([trial(0)], [trial(2, TrialStatus.PENDING)], times, {"cpu": 0.0}) == []  # level: runs on
    times["t2"] = 4.0
    big = trial(2, TrialStatus.PENDING, cpu=4.0)
    assert yields([trial(0)], [big], times, {"cpu": 1.0}) == []  # 2 freed + 1 free < 4
    assert [b.trial_id for _, b in yields([trial(0)], [big], times, {"cpu": 2.0})] == ["t2"]


def test_a_time_shared_population_starts_the_one_furthest_behind_first_fifo_keeps_its_queue():
    trials = [trial(0, TrialStatus.PENDING, queued_at=1.0), trial(1, TrialStatus.PAUSED, paused_because=PAUSED_TO_YIELD),
              trial(2, TrialStatus.PAUSED, paused_because=PAUSED_STOPPED), trial(3, TrialStatus.PENDING, queued_at=0.0)]
    times = {"t0": 6.0, "t1": 2.0, "t2": 0.0, "t3": 8.0}
    assert [t.trial_id for t in start_order(trials, times)] == ["t1", "t0", "t3"]  # not the stopped one
    assert [t.trial_id for t in start_order(trials)] == ["t3", "t0"]  # FIFO: PENDING by queue time
