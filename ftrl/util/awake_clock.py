"""A monotonic clock that leaves out the time this process was paused.

A failure detector that counts seconds of silence on `time.monotonic()` blames its peers
for its own pauses: after a SIGSTOP, or a paused or migrating VM, every peer looks silent
for the whole gap, although nobody could have been heard in it. The coordinator then
declared every node lost at once (a paused VM that holds the whole cluster restarted
every actor), and a worker killed actors as hung and dropped its coordinator link.

`AwakeClock` is called often (a ticker every `gap_s / 3` or so) and by every check of
silence. Two calls more than `gap_s` apart, between which the process used less than
half the gap in CPU time, mean the process did not run: that gap is left out, and
`resumed_at` notes when it ended. A loop that was busy (it used the CPU) is not paused:
its gaps count, so a coordinator or worker that is merely overloaded still finds dead
peers. A gap spent blocked on I/O (a stalled disk) looks like a pause; so that repeated
stalls cannot hide a dead peer for good, at most one pause is left out per `window_s`
(later ones in the window count as time).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: a gap counts as a pause only if the process used less than this share of it in CPU
#: (stopped: ~0; a thread holding the GIL or a busy loop: ~1)
PAUSE_CPU_SHARE = 0.5
MIN_GAP_S = 0.5  # shorter gaps are scheduling noise, never pauses


def was_paused(gap_s: float, cpu_s: float, pause_s: float) -> bool:
    """Whether a gap of `gap_s` between two ticks of a loop that ticks well within
    `pause_s`, in which the process used `cpu_s` of CPU, was a pause of the process
    (SIGSTOP, a paused VM) rather than the process being busy. The one rule for
    `AwakeClock` and the runner's `ProgressWatchdog`."""
    return gap_s > pause_s and cpu_s < PAUSE_CPU_SHARE * gap_s


def pause_gap(shortest_timeout_s: float) -> float:
    """The `gap_s` for a process that judges silences of `shortest_timeout_s` and more:
    a quarter of it, at least MIN_GAP_S (its ticker must run well within that)."""
    return max(MIN_GAP_S, shortest_timeout_s / 4)


class AwakeClock:
    """`clock()` minus the pauses (see the module docstring). Callable; for one thread
    (an event loop's tasks). `window_s` defaults to 4 x `gap_s`."""

    def __init__(self, gap_s: float, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.process_time, what: str = "this process",
                 window_s: float | None = None) -> None:
        self.gap_s = float(gap_s)
        if not self.gap_s > 0:
            raise ValueError(f"gap_s must be > 0, got {gap_s}")
        self.window_s = 4 * self.gap_s if window_s is None else float(window_s)
        self.what = what
        self._clock, self._cpu = clock, cpu
        self._last, self._last_cpu = clock(), cpu()
        self.asleep_s = 0.0  # total time left out
        self.pauses = 0
        self.resumed_at = float("-inf")  # awake time at which the last pause left out ended

    def __call__(self) -> float:
        now, cpu = self._clock(), self._cpu()
        gap, used = now - self._last, cpu - self._last_cpu
        self._last, self._last_cpu = now, cpu
        if was_paused(gap, used, self.gap_s):
            awake_before = now - gap - self.asleep_s
            if awake_before - self.resumed_at >= self.window_s:
                self.asleep_s += gap
                self.pauses += 1
                self.resumed_at = now - self.asleep_s
                log.warning("%s did not run for %.1fs (paused, or blocked without using the CPU): "
                            "that time does not count as silence of its peers", self.what, gap)
            else:
                log.warning("%s did not run for %.1fs, again within %.1fs: this time counts as "
                            "silence of its peers", self.what, gap, self.window_s)
        return now - self.asleep_s
