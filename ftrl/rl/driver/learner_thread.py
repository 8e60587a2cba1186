"""The learner side of the asynchronous actor-learner family (IMPALA, APPO): a thread
of the driver that takes train batches off a bounded queue and updates the learner.

    sampling (the driver thread)             learning (LearnerThread)
    harvest fragments from the runners  -->  queue of <= learner_queue_size batches
    sync the newest published weights   <--  update; publish weights every
    to each runner between fragments         broadcast_interval updates

The queue is the back-pressure: when it is full the driver stops asking runners for
more, so memory holds at most `learner_queue_size` batches, the one being filled and a
fragment per runner. A sample whose weights are more than `max_policy_lag` updates
behind the learner when its batch is taken is dropped and counted, never used. The
learner (in this process, or the elastic learner group) is only touched from this
thread while it runs; the driver reads the weights it published and, for
checkpoints, its state under `lock`.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class TrainBatch:
    """Fragments for one learner update, with the weights version each was sampled with."""

    fragments: list[dict[str, np.ndarray]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)

    @property
    def num_env_steps(self) -> int:
        return int(sum(self.env_steps))

    def add(self, fragment: dict[str, np.ndarray], version: int, env_steps: int) -> None:
        self.fragments.append(fragment)
        self.versions.append(int(version))
        self.env_steps.append(int(env_steps))


@dataclass
class WindowStats:
    """What the learner did since the last `take_window()` (one reporting window)."""

    updates: int = 0
    busy_s: float = 0.0
    lag_min: int | None = None
    lag_max: int | None = None
    lag_sum: int = 0
    lag_count: int = 0
    env_steps_trained: int = 0
    last_result: dict[str, Any] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)

    def add_lags(self, lags: list[int]) -> None:
        for lag in lags:
            self.lag_min = lag if self.lag_min is None else min(self.lag_min, lag)
            self.lag_max = lag if self.lag_max is None else max(self.lag_max, lag)
            self.lag_sum += lag
            self.lag_count += 1


class LearnerThread:
    """Consumes train batches and updates `learner` in a background thread.

    Args:
        learner: an object with `update(fragments, env_steps_sampled=)`, `version`,
            `get_weights()` (the in-process Learner or the LearnerGroup).
        queue_size: batches waiting at most (`learner_queue_size`).
        max_policy_lag: older samples are dropped when their batch is taken.
        broadcast_interval: updates between two published weights.
        env_steps_sampled: called for the total env steps sampled (drives schedules).
    """

    def __init__(self, learner: Any, *, queue_size: int, max_policy_lag: int, broadcast_interval: int,
                 env_steps_sampled: Any) -> None:
        self.learner = learner
        self.queue: queue.Queue[TrainBatch] = queue.Queue(maxsize=max(1, int(queue_size)))
        self.max_policy_lag = int(max_policy_lag)
        self.broadcast_interval = max(1, int(broadcast_interval))
        self._env_steps_sampled = env_steps_sampled
        #: held by the thread for each update; take it to read the learner's state
        self.lock = threading.RLock()
        self._stats_lock = threading.Lock()
        self._window = WindowStats()
        self._window_start = time.monotonic()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self.error: BaseException | None = None
        #: (version, flat weights) the runners should sample with (newest published)
        self.published: tuple[int, np.ndarray] = learner.get_weights()
        # cumulative counters (checkpointed by the algorithm)
        self.num_samples_dropped_stale = 0
        self.env_steps_dropped_stale = 0
        self.env_steps_trained = 0
        self.num_updates = 0
        self._thread = threading.Thread(target=self._run, name="ftrl-learner", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the driver's side

    def put(self, batch: TrainBatch, timeout_s: float) -> bool:
        """Queue a batch; False when the queue stayed full for `timeout_s` (back-pressure)."""
        self.raise_error()
        try:
            self.queue.put(batch, timeout=timeout_s)
        except queue.Full:
            return False
        self._idle.clear()
        return True

    def raise_error(self) -> None:
        """Re-raise, on the driver's thread, what stopped the learner thread."""
        if self.error is not None:
            raise self.error

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued batch was learned on (tests, the end of a run)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.raise_error()
            if self.queue.empty() and self._idle.wait(0.05) and self.queue.empty():
                return True
        return False

    def take_window(self) -> dict[str, Any]:
        """The reporting window's figures, and a new window."""
        with self._stats_lock:
            w, self._window = self._window, WindowStats()
            now = time.monotonic()
            span, self._window_start = now - self._window_start, now
        means = {k: v / w.updates for k, v in w.sums.items()} if w.updates else {}
        learner = {**w.last_result, **means}
        return {
            "learner": learner,
            "num_learner_updates_this_iter": w.updates,
            "env_steps_trained_this_iter": w.env_steps_trained,
            "policy_lag_min": w.lag_min,
            "policy_lag_mean": (w.lag_sum / w.lag_count) if w.lag_count else None,
            "policy_lag_max": w.lag_max,
            "learner_queue_depth": self.queue.qsize(),
            "learner_busy_share": min(1.0, w.busy_s / span) if span > 0 else 0.0,
            "num_samples_dropped_stale": self.num_samples_dropped_stale,
            "env_steps_dropped_stale": self.env_steps_dropped_stale,
        }

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the update in progress (queued batches are dropped)."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("the learner thread did not stop within %.0f s", timeout_s)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.queue.get(timeout=0.1)
            except queue.Empty:
                self._idle.set()
                continue
            try:
                self._learn(batch)
            except BaseException as e:  # handed to the driver's thread (raise_error)
                log.exception("the learner thread failed")
                self.error = e
                self._idle.set()
                return

    def _learn(self, batch: TrainBatch) -> None:
        t0 = time.monotonic()
        with self.lock:
            current = int(self.learner.version)
            used: list[dict[str, np.ndarray]] = []
            lags: list[int] = []
            for fragment, version, steps in zip(batch.fragments, batch.versions, batch.env_steps, strict=True):
                lag = current - version
                if lag > self.max_policy_lag:
                    self.num_samples_dropped_stale += 1
                    self.env_steps_dropped_stale += steps
                    continue
                used.append(fragment)
                lags.append(lag)
            result: dict[str, Any] = {}
            if used:
                result = self.learner.update(used, env_steps_sampled=int(self._env_steps_sampled()))
                self.num_updates += 1
                if self.num_updates % self.broadcast_interval == 0:
                    self.published = self.learner.get_weights()
        busy = time.monotonic() - t0
        trained = int(result.get("num_samples", 0))
        self.env_steps_trained += trained
        with self._stats_lock:
            w = self._window
            w.busy_s += busy
            if used:
                w.updates += 1
                w.env_steps_trained += trained
                w.add_lags(lags)
                w.last_result = result
                for key, value in result.items():
                    if isinstance(value, float) and math.isfinite(value) and key not in ("lr", "weights_version"):
                        w.sums[key] = w.sums.get(key, 0.0) + value
