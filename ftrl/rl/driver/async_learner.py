"""AsyncLearner: the learner of the asynchronous actor-learner family (IMPALA, APPO)
behind a thread of the driver that takes train batches off a bounded queue.

    sampling (the driver thread)             learning (the learner thread)
    harvest fragments from the runners  -->  add() fills train batches; queue_full_batches()
                                             queues them: <= learner_queue_size wait
    sync the newest published weights   <--  update; publish weights every
    to each runner between fragments         broadcast_interval updates

The queue is the back-pressure: when it is full the driver stops asking runners for
more, so memory holds at most `learner_queue_size` batches, those being filled and a
fragment per runner. A sample whose weights are more than `max_policy_lag` updates
behind the learner when its batch is taken is dropped and counted, never used.

It is the driver's `LearnerAccess` (ftrl.rl.driver.learner_access): the learner (in
this process, or the elastic learner group) is only touched from the thread while it
runs; the driver gets the weights it published (`weights_for_runners`), reads an
in-process learner's weights and state under its lock (`at_rest`; a learner group
serves its reads itself), and changes the learner's state or hyperparameters with the
thread paused (`paused`: the same lock, held by the thread for each update).
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class TrainBatch:
    """Fragments for one learner update, with the weights version each was sampled with
    (its first step's: weights pushed while a runner samples act from its next step on)
    and the mean version of its steps."""

    fragments: list[dict[str, np.ndarray]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)
    mean_versions: list[float] = field(default_factory=list)

    @property
    def num_env_steps(self) -> int:
        return int(sum(self.env_steps))

    def add(self, fragment: dict[str, np.ndarray], version: int, env_steps: int,
            mean_version: float | None = None) -> None:
        self.fragments.append(fragment)
        self.versions.append(int(version))
        self.env_steps.append(int(env_steps))
        self.mean_versions.append(float(version if mean_version is None else mean_version))


@dataclass
class WindowStats:
    """What the learner did since the last `take_window()` (one reporting window)."""

    updates: int = 0
    busy_s: float = 0.0
    lags: list[float] = field(default_factory=list)
    env_steps_trained: int = 0
    last_result: dict[str, Any] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)


def within_lag(batch: TrainBatch, current_version: int, max_policy_lag: int,
               counters: dict[str, int]) -> tuple[list[dict[str, np.ndarray]], list[float]]:
    """The fragments of `batch` whose first step is at most `max_policy_lag` updates behind
    `current_version`, and their policy lags (the mean over their steps); the others are
    counted in `counters` (num_samples_dropped_stale, env_steps_dropped_stale) and left out."""
    used: list[dict[str, np.ndarray]] = []
    lags: list[float] = []
    for fragment, version, steps, mean_version in zip(batch.fragments, batch.versions, batch.env_steps,
                                                      batch.mean_versions, strict=True):
        if current_version - version > max_policy_lag:
            counters["num_samples_dropped_stale"] += 1
            counters["env_steps_dropped_stale"] += steps
            continue
        used.append(fragment)
        lags.append(current_version - mean_version)
    return used, lags


def lag_stats(lags: list[float]) -> dict[str, Any]:
    """policy_lag_min / _mean / _max of the samples one window used (None: none): updates
    between the weights that chose a step's action and the update that trains on it,
    averaged over each fragment's steps."""
    return {"policy_lag_min": min(lags) if lags else None,
            "policy_lag_mean": sum(lags) / len(lags) if lags else None,
            "policy_lag_max": max(lags) if lags else None}


class AsyncLearner:
    """Consumes train batches and updates `learner` in a background thread (module docstring).

    Args:
        learner: an object with `update(fragments, env_steps_sampled=)`, `version`,
            `get_weights()`, `get_state()` (the in-process Learner or the LearnerGroup).
        queue_size: batches waiting at most (`learner_queue_size`).
        max_policy_lag: older samples are dropped when their batch is taken.
        broadcast_interval: updates between two published weights.
        batch_env_steps: env steps of one train batch (`train_batch_size`).
        env_steps_sampled: called for the total env steps sampled (drives schedules).
        counters: the algorithm's cumulative counters; the thread adds its stale drops.
        locked_reads: the driver reads the learner under the lock (False: a learner
            group, which serves its reads itself).
    """

    def __init__(self, learner: Any, *, queue_size: int, max_policy_lag: int, broadcast_interval: int,
                 batch_env_steps: int, env_steps_sampled: Callable[[], int], counters: dict[str, int],
                 locked_reads: bool = True) -> None:
        self.learner = learner
        self.queue: queue.Queue[TrainBatch] = queue.Queue(maxsize=max(1, int(queue_size)))
        self.max_policy_lag = int(max_policy_lag)
        self.stale_version_gap = self.max_policy_lag
        self.broadcast_interval = max(1, int(broadcast_interval))
        self.batch_env_steps = int(batch_env_steps)
        self._env_steps_sampled = env_steps_sampled
        self._locked_reads = locked_reads
        self._pending = TrainBatch()  # the batch being filled (the driver's thread)
        self._full: list[TrainBatch] = []  # full batches not queued yet (the driver's thread)
        #: held by the thread for each update; take it to read or change the learner
        self.lock = threading.RLock()
        self._stats_lock = threading.Lock()
        self._window = WindowStats()
        self._window_start = time.monotonic()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        #: (version, flat weights) the runners should sample with (newest published)
        self.published: tuple[int, np.ndarray] | None = None
        self.counters = counters
        self.num_updates = 0
        self._thread = threading.Thread(target=self._run, name="ftrl-learner", daemon=True)

    # ------------------------------------------------------------------ LearnerAccess

    @property
    def version(self) -> int:
        return int(self.learner.version)

    def weights_for_runners(self) -> tuple[int, np.ndarray]:
        """The newest published weights (the learner's own before the thread starts)."""
        published = self.published
        return published if published is not None else self.learner.get_weights()

    def get_weights(self) -> tuple[int, np.ndarray]:
        with self.at_rest():
            return self.learner.get_weights()

    def get_state(self) -> dict[str, Any]:
        with self.at_rest():
            return self.learner.get_state()

    def at_rest(self) -> contextlib.AbstractContextManager:
        return self.lock if self._locked_reads else contextlib.nullcontext()

    def paused(self) -> contextlib.AbstractContextManager:
        return self.lock

    def publish(self) -> None:
        """The learner's weights (just loaded by an exploit) are the runners' next ones."""
        self.published = self.learner.get_weights()

    def replace_learner(self, learner: Any, *, in_process: bool) -> None:
        """Learn with `learner` from the next batch on (the caller holds `paused()`)."""
        with self.lock:
            self.learner = learner
            self._locked_reads = in_process

    def start(self) -> None:
        """Publish the learner's weights and start the thread."""
        if self._thread.is_alive() or self._stop.is_set():
            return
        self.published = self.learner.get_weights()
        self._window_start = time.monotonic()
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the update in progress (queued batches are dropped)."""
        self._stop.set()
        if not self._thread.is_alive():
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("the learner thread did not stop within %.0f s", timeout_s)

    def reconfigure(self, *, queue_size: int, max_policy_lag: int, broadcast_interval: int,
                    batch_env_steps: int) -> None:
        """New settings in place, from the next batch on (an exploit changed them, on the
        driver's thread): the queue holds at most `queue_size` batches (those queued stay,
        and a smaller queue takes no more until it drains), the lag bound, the broadcast
        interval and the batch size (the batch being filled is full now if it holds the
        new size). The thread and the learner are the same."""
        with self.lock, self.queue.mutex:
            self.queue.maxsize = max(1, int(queue_size))
            self.queue.not_full.notify_all()
            self.max_policy_lag = self.stale_version_gap = int(max_policy_lag)
            self.broadcast_interval = max(1, int(broadcast_interval))
            self.batch_env_steps = int(batch_env_steps)
        self._close_if_full()

    # ------------------------------------------------------------------ the driver's side

    def add(self, fragment: dict[str, np.ndarray], version: int, env_steps: int,
            mean_version: float | None = None) -> None:
        """A fragment for the batch being filled (sampled with weights `version` from its
        first step, `mean_version` over its steps). The batch is full, and waits for
        `queue_full_batches`, as soon as it holds `batch_env_steps` (so fragments that
        come several at once still make batches of that size where their sizes add up)."""
        self._pending.add(fragment, version, env_steps, mean_version)
        self._close_if_full()

    def _close_if_full(self) -> None:
        if self._pending.num_env_steps >= self.batch_env_steps:
            self._full.append(self._pending)
            self._pending = TrainBatch()

    def queue_full_batches(self, while_full: Callable[[], Any]) -> None:
        """Queue every full batch; while the queue is full (back-pressure: the runners
        wait), call `while_full` between tries."""
        while self._full:
            while not self.put(self._full[0], timeout_s=0.1):
                while_full()
            self._full.pop(0)

    def put(self, batch: TrainBatch, timeout_s: float) -> bool:
        """Queue a batch; False when the queue stayed full for `timeout_s` (back-pressure)."""
        self.raise_error()
        try:
            self.queue.put(batch, timeout=timeout_s)
        except queue.Full:
            return False
        return True

    def raise_error(self) -> None:
        """Re-raise, on the driver's thread, what stopped the learner thread."""
        if self.error is not None:
            raise self.error

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
            **lag_stats(w.lags),
            "learner_queue_depth": self.queue.qsize(),
            "learner_busy_share": min(1.0, w.busy_s / span) if span > 0 else 0.0,
        }

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            try:
                self._learn(batch)
            except BaseException as e:  # handed to the driver's thread (raise_error)
                log.exception("the learner thread failed")
                self.error = e
                return

    def _learn(self, batch: TrainBatch) -> None:
        t0 = time.monotonic()
        with self.lock:
            used, lags = within_lag(batch, int(self.learner.version), self.max_policy_lag, self.counters)
            result: dict[str, Any] = {}
            if used:
                result = self.learner.update(used, env_steps_sampled=int(self._env_steps_sampled()))
                if (self.num_updates + 1) % self.broadcast_interval == 0:
                    self.published = self.learner.get_weights()
        busy = time.monotonic() - t0
        trained = int(result.get("num_samples", 0))
        with self._stats_lock:
            w = self._window
            w.busy_s += busy
            if used:
                # counted with the window's update under one lock: a driver that sees the
                # count grow and takes the window finds this update in it
                self.num_updates += 1
                w.updates += 1
                w.env_steps_trained += trained
                w.lags += lags
                w.last_result = result
                for key, value in result.items():
                    if isinstance(value, float) and math.isfinite(value) and key not in ("lr", "weights_version"):
                        w.sums[key] = w.sums.get(key, 0.0) + value
