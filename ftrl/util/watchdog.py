"""A progress watchdog: a process whose armed work stops making progress kills itself.

An env runner's `step` that hangs (a deadlock, `sleep` forever, a Python `while True`)
leaves the actor answering pings, since calls run off the event loop; only a watchdog in
the process sees that sampling has stopped moving. The hot loop stamps progress with one
attribute store (`wd.stamp = time.monotonic()`: no lock, no extra syscall); a daemon
thread ticks and, when work is in progress and the stamp is older than `timeout_s`,
writes one log line and ends the process with `os._exit(EXIT_WATCHDOG)`. The worker sees
a failed actor (`describe_exit` names the code) and restarts it under its policy.

Pauses are not stalls: when the thread itself did not run for `pause_s` and the process
used almost no CPU meanwhile (it was stopped with SIGSTOP, or the VM was paused), the
stall clock starts again when it runs, so the env gets its full timeout after a pause.
A gap during which the process was busy (a C call holding the GIL) is not a pause, and
there is one such credit per stamp, so a hang never earns a second one.

Limit: the watchdog thread needs the GIL to run. A Python-level spin lets it run (the
interpreter switches threads every `sys.getswitchinterval()`), and so do blocking calls
that release the GIL (sleep, I/O, most numpy); a C extension that spins while holding the
GIL starves it, and then only the worker's ping timeout (if the event loop starves too)
or the driver's `sample_timeout_s` notices.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from ftrl.util.awake_clock import was_paused
from ftrl.util.logfmt import kv

#: Exit code of a process ended by its own watchdog (distinct from Python's 1/2 and the
#: host's 3); the worker maps it to a readable reason.
EXIT_WATCHDOG = 86

EXIT_REASONS: dict[int, str] = {
    EXIT_WATCHDOG: "killed by its own watchdog: no progress (an env step hung) within its timeout",
}


def exit_reason(code: int) -> str | None:
    """What a known exit code of an actor process means, or None."""
    return EXIT_REASONS.get(code)


def _die(message: str) -> None:  # pragma: no cover - ends the process
    """Write `message` to stderr (the actor's log) and end the process at once."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    try:
        os.write(2, (message + "\n").encode(errors="replace"))
    finally:
        os._exit(EXIT_WATCHDOG)


class ProgressWatchdog:
    """Calls `on_stall(stalled_s)` (default: log and `os._exit(EXIT_WATCHDOG)`) when work is
    in progress and no progress was stamped for `timeout_s` seconds.

    Usage: `begin(what)` when work starts (arms and stamps; `what` names the work in the
    kill message), assign `stamp = time.monotonic()` on each unit of progress, `end()`
    when the work is done (disarms). The thread starts on the first `begin()` and ends
    on `close()`; it fires at most once.
    """

    def __init__(self, timeout_s: float, what: str = "env step", name: str = "",
                 on_stall: Callable[[float], None] | None = None, tick_s: float | None = None) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.what = what
        self.name = name
        self.tick_s = tick_s if tick_s is not None else min(1.0, max(0.02, self.timeout_s / 8))
        #: a longer gap between two of the thread's ticks, with the process using almost
        #: no CPU meanwhile, means the process was paused (`awake_clock.was_paused`)
        self.pause_s = max(4 * self.tick_s, self.timeout_s / 4)
        self.on_stall = on_stall if on_stall is not None else self._kill
        #: monotonic time of the last progress; 0.0 while no work is in progress
        self.stamp = 0.0
        self.fired = False
        self._resumed = 0.0  # monotonic time the thread last ran again after a pause
        self._credited = 0.0  # the stamp that pause credit was given for (one per stamp)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, what: str | None = None) -> None:
        """Work starts: arm the watchdog (starting its thread the first time); `what`
        names the work from now on ("env step", "env construction")."""
        if what is not None:
            self.what = what
        self.stamp = time.monotonic()
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._watch, name="ftrl-watchdog", daemon=True)
            self._thread.start()

    def end(self) -> None:
        """Work is done: disarm until the next `begin()`."""
        self.stamp = 0.0

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the thread (waits at most `timeout_s` for it)."""
        self.stamp = 0.0
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def stalled_for(self, now: float | None = None) -> float:
        """Seconds since the last progress while armed (0.0 while disarmed)."""
        stamp = self.stamp
        if stamp == 0.0:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - max(stamp, self._resumed))

    def check(self, now: float | None = None) -> bool:
        """One tick: fire `on_stall` if armed and stalled past the timeout; True if it fired."""
        stalled = self.stalled_for(now)
        if self.fired or stalled <= self.timeout_s:
            return False
        self.fired = True
        self.on_stall(stalled)
        return True

    def resumed(self, now: float) -> bool:
        """The process ran again at `now` after a pause: the stall clock starts there,
        once per stamp (False, and nothing changes, when this stamp had its credit)."""
        stamp = self.stamp
        if stamp == 0.0 or stamp == self._credited:
            return False
        self._credited = stamp
        self._resumed = now
        return True

    def _watch(self) -> None:
        last, last_cpu = time.monotonic(), time.process_time()
        while not self._stop.wait(self.tick_s):
            now, cpu = time.monotonic(), time.process_time()
            gap = now - last
            if was_paused(gap, cpu - last_cpu, self.pause_s):
                self.resumed(now)
            last, last_cpu = now, cpu
            if self.check(now):
                return

    def _kill(self, stalled_s: float) -> None:  # pragma: no cover - ends the process
        _die(kv(event="WATCHDOG_KILL", actor=self.name or None, pid=os.getpid(), exit_code=EXIT_WATCHDOG,
                reason=f"{self.what} hung for {stalled_s:.1f} s (timeout {self.timeout_s:g} s): "
                       "exiting so the worker restarts this actor"))
