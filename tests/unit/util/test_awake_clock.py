"""AwakeClock: a pause (a long gap without CPU) is left out; a busy gap is not."""

from __future__ import annotations

import math

import pytest

from ftrl.util.awake_clock import MIN_GAP_S, AwakeClock, pause_gap


class Fake:
    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 5.0

    def run(self, seconds: float, cpu_share: float) -> None:
        self.now += seconds
        self.cpu += seconds * cpu_share


def make(gap_s: float = 1.0) -> tuple[AwakeClock, Fake]:
    f = Fake()
    return AwakeClock(gap_s, clock=lambda: f.now, cpu=lambda: f.cpu), f


def test_short_gaps_all_count():
    clock, f = make()
    start = clock()
    for _ in range(10):
        f.run(0.9, 0.0)  # idle, but under gap_s: a normal tick
        clock()
    assert clock() - start == pytest.approx(9.0)
    assert clock.pauses == 0 and clock.resumed_at == -math.inf


def test_a_pause_is_left_out_and_noted():
    clock, f = make()
    t0 = clock()
    f.run(0.5, 0.1)
    clock()
    f.run(30.0, 0.0)  # SIGSTOP or a paused VM: no CPU at all
    t1 = clock()
    assert t1 - t0 == pytest.approx(0.5)
    assert clock.pauses == 1 and clock.asleep_s == pytest.approx(30.0)
    assert clock.resumed_at == pytest.approx(t1)
    f.run(0.5, 0.5)
    assert clock() - t1 == pytest.approx(0.5)  # time counts again after it


def test_a_busy_gap_counts():
    """A loop blocked by its own work used the CPU: peers' silence keeps counting, so an
    overloaded coordinator still finds dead nodes."""
    clock, f = make()
    t0 = clock()
    f.run(3.0, 0.9)
    assert clock() - t0 == pytest.approx(3.0)
    assert clock.pauses == 0


def test_the_cpu_share_rule_is_per_gap():
    clock, f = make()
    t0 = clock()
    f.run(4.0, 0.6)  # over half: busy
    clock()
    f.run(4.0, 0.4)  # under half: paused
    assert clock() - t0 == pytest.approx(4.0)
    assert clock.pauses == 1


def test_gap_must_be_positive():
    with pytest.raises(ValueError, match="gap_s"):
        AwakeClock(0.0)


def test_one_pause_per_window_so_stalls_cannot_hide_a_dead_peer_for_good():
    """Repeated idle stalls (a disk that blocks the loop) look like pauses: only the
    first in each window is left out, so time still passes."""
    clock, f = make(gap_s=1.0)  # window 4 s
    t0 = clock()
    f.run(2.0, 0.0)
    clock()  # left out
    for _ in range(2):
        f.run(0.5, 0.0)
        clock()
        f.run(2.0, 0.0)  # within 4 s of awake time after the last pause: counts
        clock()
    assert clock.pauses == 1
    assert clock() - t0 == pytest.approx(5.0)
    f.run(3.0, 0.5)
    clock()
    f.run(2.0, 0.0)  # past the window again: left out
    clock()
    assert clock.pauses == 2


def test_pause_gap_has_a_floor_above_the_ticks():
    """A tiny heartbeat timeout must not make every idle tick a pause (the clock would
    stand still and no node would ever be lost)."""
    assert pause_gap(0.1) == MIN_GAP_S
    assert pause_gap(8.0) == 2.0
    clock, f = make(gap_s=pause_gap(0.2))
    t0 = clock()
    for _ in range(100):
        f.run(0.05, 0.0)  # the coordinator's idle 0.05 s ticks
        clock()
    assert clock() - t0 == pytest.approx(5.0)
    assert clock.pauses == 0
