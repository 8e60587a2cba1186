"""StateWriter: the driver's newest state made durable after every iteration, off the
training path.

    writer = StateWriter(output_dir, metrics_log, on_durable=report_row).start()
    writer.submit(iteration, state, row, learner=learner_state_or_fetch)  # never blocks
    writer.flush(timeout_s=30)                                        # stop(), finish()

`submit` only hands over; a thread of its own writes, in this order:

1. `learner_state.ftrl`, when the learner state is at hand (a dict: the driver's own
   learner, copied by the caller);
2. `driver_state.ftrl`: the small state of the iteration (counters, filter, episode
   window, RNG, the actors' incarnations, the learner's version and the metrics row);
3. the iteration's row, appended to metrics.jsonl;
4. `on_durable(row)` (the job link's report: the coordinator never shows a row the
   output directory does not hold);
5. `learner_state.ftrl`, when the state must be fetched (a callable: remote learners,
   asked for exactly the version the driver state names; a learner that cannot serve
   it any more is skipped until the next iteration).

Both files are checkpoint files (`ftrl.rl.driver.checkpoint`: atomic, checksummed, msgpack +
numpy). The newest state wins: when iterations come faster than the disk, states
in between are skipped, never rows (every row is written, in order). A row is on
disk only once a driver state at least as new is, so a driver that dies loses at most
the iteration in flight: its successor resumes from driver_state.ftrl, and no row of
metrics.jsonl ever has to be removed. A failed write (a full disk) is logged and tried
again, with the newest state and every row not yet written, after a growing pause;
training never waits for the disk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftrl.rl.driver.checkpoint import CorruptCheckpointError, decode_checkpoint, encode_checkpoint
from ftrl.rl.driver.metrics import MetricsLog
from ftrl.util.backoff import Backoff
from ftrl.util.files import atomic_write_bytes
from ftrl.util.run_dir import DRIVER_STATE_FILE, LEARNER_STATE_FILE

log = logging.getLogger(__name__)

LearnerSource = dict[str, Any] | Callable[[], dict[str, Any] | None] | None


def load_state_file(path: Path) -> dict[str, Any] | None:
    """A verified state file, or None (missing, torn or corrupt: a warning)."""
    try:
        return decode_checkpoint(path.read_bytes())
    except FileNotFoundError:
        return None
    except (CorruptCheckpointError, OSError) as e:
        log.warning("ignoring %s: %s", path, e)
        return None


class StateWriter:
    """Writes each iteration's state, then its row, then reports it (module docstring)."""

    def __init__(self, directory: str | Path, metrics_log: MetricsLog | None,
                 on_durable: Callable[[dict[str, Any]], Any] | None = None):
        self.directory = Path(directory)
        self.state_path = self.directory / DRIVER_STATE_FILE
        self.learner_path = self.directory / LEARNER_STATE_FILE
        self.metrics_log = metrics_log
        self.on_durable = on_durable
        self._cond = threading.Condition()
        self._state: tuple[int, dict[str, Any], LearnerSource] | None = None  # the newest, unwritten
        self._rows: list[dict[str, Any]] = []  # unwritten, in order
        self._busy = False
        self._closed = False
        self.written_iteration = -1  # of the newest driver_state.ftrl on disk
        self.learner_version = -1  # of the newest learner_state.ftrl on disk
        self.states_skipped = 0  # newer ones came before they were written
        self.last_write_s = 0.0
        self.failures = 0
        self._backoff = Backoff(base=0.5, cap=10.0)  # after a failed write
        self._rows_written = 0  # of the rows being written now
        self._thread = threading.Thread(target=self._run, name="ftrl-state-writer", daemon=True)

    def start(self) -> StateWriter:
        self._thread.start()
        return self

    def submit(self, iteration: int, state: dict[str, Any], row: dict[str, Any] | None,
               learner: LearnerSource = None) -> None:
        """Hand over iteration `iteration`'s state and row (never blocks on the disk).
        `learner`: the learner's state (a dict) or how to fetch it (a callable that
        returns it, or None when it cannot); None: nothing to write for the learner."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the state writer is closed")
            if self._state is not None:
                self.states_skipped += 1
            self._state = (int(iteration), state, learner)
            if row is not None:
                self._rows.append(row)
            self._cond.notify_all()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything submitted is written (or `timeout_s`); whether it was."""
        with self._cond:
            return self._cond.wait_for(lambda: self._idle() or not self._thread.is_alive(), timeout=timeout_s)

    def close(self, timeout_s: float = 30.0) -> bool:
        """Flush, then end the thread. Returns whether everything was written."""
        flushed = self.flush(timeout_s) if self._thread.is_alive() else self._idle()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        return flushed

    def _idle(self) -> bool:
        return self._state is None and not self._rows and not self._busy

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._state is not None or self._rows)
                if self._state is None and not self._rows:
                    return  # closed, nothing left
                job, self._state = self._state, None
                rows, self._rows = self._rows, []
                self._busy = True
            try:
                self._write(job, rows)
                self._backoff.reset()
            except Exception as e:  # never let the thread die: try again, rows kept in order
                self.failures += 1
                delay = self._backoff.next_delay()
                log.error("writing the driver state under %s failed (%s: %s); trying again in %.1fs",
                          self.directory, type(e).__name__, e, delay)
                with self._cond:
                    if self._closed:  # closing: no more tries
                        log.error("giving up: %d rows not written to %s", len(rows) - self._rows_written,
                                  self.directory)
                        continue
                    if self._state is None:
                        self._state = job
                    self._rows[:0] = rows[self._rows_written:]
                    self._cond.wait_for(lambda: self._closed, timeout=delay)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, job: tuple[int, dict[str, Any], LearnerSource] | None,
               rows: list[dict[str, Any]]) -> None:
        t0 = time.monotonic()
        self._rows_written = 0  # a failure before the rows re-queues all of them
        learner: LearnerSource = None
        if job is not None:
            iteration, state, learner = job
            if isinstance(learner, dict):
                self._write_learner(learner)
                learner = None
            # no directory fsync: after a power loss the previous state (whole) will do
            atomic_write_bytes(self.state_path, encode_checkpoint(state), sync_dir=False)
            self.written_iteration = iteration
        if rows and self.metrics_log is not None:
            self.metrics_log.append_many(rows)
        self._rows_written = len(rows)
        for row in rows:
            if self.on_durable is not None:
                try:
                    self.on_durable(row)
                except Exception:
                    log.exception("reporting a durable row failed")
        if callable(learner):
            fetched = learner()
            if fetched is not None:
                self._write_learner(fetched)
        self.last_write_s = time.monotonic() - t0

    def _write_learner(self, state: dict[str, Any]) -> None:
        version = int(state.get("version", -1))
        if version == self.learner_version and self.learner_path.exists():
            return  # no update since: the file holds this version already
        atomic_write_bytes(self.learner_path, encode_checkpoint(state), sync_dir=False)
        self.learner_version = version
