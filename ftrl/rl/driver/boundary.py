"""Work from other threads for the training thread, run at the next iteration boundary.

    work = BoundaryWork("job-3")
    future = work.submit(lambda algo: algo.checkpoint_now())   # any thread
    work.run(algo)                  # the training thread, at the start of train()
    work.close("ended (stop_iters)")    # no boundary will come: what waits fails

`submit` returns a Future of `fn(target)`; `run` runs what waits in submission order,
each result or exception going to its Future (a failed piece of work does not fail
training; a cancelled Future's `fn` never runs). Once closed, waiting and later work
fail with `RunEnded`. The driver actor's `checkpoint_now` and `exploit` go through it
(`Algorithm.run_at_boundary`).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from typing import Any

from ftrl.wire.errors import FailedPreconditionError


class RunEnded(FailedPreconditionError):
    """The run ended (or stopped) before the next iteration boundary: work handed to
    `run_at_boundary` will never run."""


class BoundaryWork:
    """The queue of work waiting for the next iteration boundary of one run (`name`:
    how errors name the run)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._work: list[tuple[Callable[[Any], Any], cf.Future]] = []
        self._closed = ""  # why no boundary will come any more ("": one will)

    def submit(self, fn: Callable[[Any], Any]) -> cf.Future:
        """Queue `fn` for the next boundary; its result or exception goes to the returned
        Future. Thread-safe. Once closed, the Future fails with `RunEnded` at once."""
        future: cf.Future = cf.Future()
        with self._lock:
            if not self._closed:
                self._work.append((fn, future))
                return future
            why = self._closed
        future.set_exception(RunEnded(f"the run of {self.name} {why}: no iteration boundary will come"))
        return future

    def run(self, target: Any) -> None:
        """Run what waits, in submission order, as `fn(target)` (the training thread)."""
        with self._lock:
            work, self._work = self._work, []
        for fn, future in work:
            if not future.set_running_or_notify_cancel():
                continue  # given up by its caller: never run
            try:
                future.set_result(fn(target))
            except Exception as e:  # the caller's to handle; training goes on
                future.set_exception(e)

    def close(self, why: str) -> None:
        """No boundary will come any more: fail what waits for one, and what comes later
        (the first reason given is kept)."""
        with self._lock:
            if not self._closed:
                self._closed = why
            work, self._work = self._work, []
        for _, future in work:
            if future.set_running_or_notify_cancel():
                future.set_exception(RunEnded(f"the run of {self.name} {why} before the next iteration boundary"))
