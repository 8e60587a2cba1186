"""Weights that arrive while a runner samples: loaded before its next fragment.

A runner's `set_weights` (and the weight pulls and broadcast trees that end in it) never
waits for a fragment being sampled: with the runner's lock held it leaves the weights in
its `WeightsInbox`, and the runner loads the newest ones there before it samples again
(or reports its weights). The runners of asynchronous algorithms sample a fragment ahead
on their sample channel (`ftrl.rl.sampling.sample_plane`), so a push usually finds them
busy; without the inbox the driver would wait out a fragment for every push.
"""

from __future__ import annotations

import threading

import numpy as np

#: (version, flat weights, observation filter state or None)
Weights = tuple[int, np.ndarray, dict | None]


class WeightsInbox:
    """The last weights that arrived while the runner was busy (one slot: the driver's
    latest push wins, as with an idle runner; a restored driver may push a lower version)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: Weights | None = None

    def put(self, version: int, weights: np.ndarray, filter_state: dict | None) -> None:
        with self._lock:
            self._waiting = (int(version), weights, filter_state)

    def take(self) -> Weights | None:
        """The waiting weights (emptying the inbox), or None."""
        with self._lock:
            waiting, self._waiting = self._waiting, None
            return waiting
