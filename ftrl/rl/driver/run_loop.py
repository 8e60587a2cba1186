"""Running an Algorithm to a stop: train until a stop criterion is met, then a final
checkpoint and output_dir/result.json.

    summary = run(algo, StopCriteria(stop_iters=100))   # same as algo.run(...)
    summary["stop_reason"]  # "stop_reward" | "stop_timesteps" | "stop_iters" | "stopped" |
                            # "drained" | "interrupted" | "learner_wait_timeout" | "error"

`run` repeats `algo.train()` (one iteration: training_iteration(), evaluation,
metrics.jsonl, periodic checkpoint) and checks `StopCriteria.met` after each. Stops:

- a criterion met (also before the first iteration, e.g. after a resume): its name;
  final checkpoint.
- Ctrl-C or SIGTERM (main thread only), or `stop_event` set: "stopped" (or the
  `StopRequest`'s reason, e.g. "drained") after the iteration in progress; final
  checkpoint. A second Ctrl-C aborts at once: "interrupted", no final checkpoint, so a
  checkpoint never holds a half-done iteration.
- "drained" (the driver's node is being pre-empted; the job goes on elsewhere from
  the checkpoint): final checkpoint, but no result.json (the job has not ended).
- LearnerWaitTimeout (too few learners for too long): "learner_wait_timeout"; final
  checkpoint; the message goes into the summary's "error".
- any other exception: "error"; no final checkpoint; re-raised after result.json.

`Algorithm.run` and `Algorithm.finish` delegate here; the functions call back through
`algo.train`, `algo.finish` and `algo.save_checkpoint`.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ftrl.rl.learning.learner_group import LearnerWaitTimeout

if TYPE_CHECKING:
    from ftrl.config import StopCriteria

log = logging.getLogger(__name__)


class Trainable(Protocol):
    """What `run` drives: an Algorithm, or anything that trains in iterations."""

    def train(self) -> dict[str, Any]:
        """One iteration; its result dict (what the stop criteria read)."""

    def progress(self) -> dict[str, Any]:
        """What the stop criteria see before the first iteration (e.g. after a resume)."""

    def finish(self, reason: str, result: dict[str, Any] | None, error: BaseException | None = None,
               final_checkpoint: bool = True, note: str = "") -> dict[str, Any]:
        """End the run (final checkpoint, summary); returns the summary."""


class StopRequest(threading.Event):
    """A stop asked for from another thread; the run ends with `reason` as its
    stop_reason (the first request's reason wins)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason = "stopped"
        self._first = threading.Lock()

    def request(self, reason: str = "stopped") -> None:
        with self._first:
            if not self.is_set():
                self.reason = reason
                self.set()


def _requested(stop_event: threading.Event | None) -> str | None:
    """The stop reason `stop_event` asks for, or None."""
    if stop_event is None or not stop_event.is_set():
        return None
    return stop_event.reason if isinstance(stop_event, StopRequest) else "stopped"


def run(
    algo: Trainable,
    stop: StopCriteria,
    on_result: Callable[[dict[str, Any]], Any] | None = None,
    stop_event: threading.Event | None = None,
) -> dict[str, Any]:
    """Train `algo` until `stop` is met; checkpoint at the end; write output_dir/result.json.
    Returns {"stop_reason", "result", "checkpoint", ...} (see `finish`). `on_result` is
    called with every iteration's result dict."""
    result: dict[str, Any] | None = None
    reason = stop.met(algo.progress()) or _requested(stop_event)
    error: BaseException | None = None
    aborted = False
    note = ""
    with _GracefulStop() as stop_requested:
        try:
            while reason is None:
                result = algo.train()
                if on_result is not None:
                    on_result(result)
                reason = stop.met(result)
                if reason is None:
                    reason = "stopped" if stop_requested.is_set() else _requested(stop_event)
        except KeyboardInterrupt:
            reason, aborted = "interrupted", True
        except LearnerWaitTimeout as e:
            # too few learners for too long: end cleanly, with a checkpoint
            log.error("%s", e)
            reason, note = "learner_wait_timeout", str(e)
        except BaseException as e:
            reason = "error"
            error = e
    summary = algo.finish(reason, result, error, final_checkpoint=not aborted, note=note)
    if error is not None:
        raise error
    return summary


# --------------------------------------------------------------------------- signals


class _GracefulStop:
    """While active (main thread only): the first SIGINT/SIGTERM sets the event, the
    second raises KeyboardInterrupt. Previous handlers come back on exit."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()
        log.warning("stop requested: finishing this iteration (again to abort at once)")

    def __enter__(self) -> threading.Event:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handler)
        return self.event

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
