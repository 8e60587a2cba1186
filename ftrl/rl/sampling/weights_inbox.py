"""Weights that arrive while a runner samples: loaded at its next vector step.

A runner's `set_weights` (and the weight pulls and broadcast trees that end in it) never
waits for a fragment being sampled: with the runner's lock held it leaves the weights in
its `WeightsInbox`. The sampling loop looks at the inbox before every vector step of a
recorded fragment and loads weights waiting there, so the fragment's next steps act
with them (each step's log-probability is the behaviour policy's that chose it, which
is what V-trace corrects from); the fragment reports the version it started with (the
oldest: what `max_policy_lag` checks) and its steps' mean version (the policy lag
reported). An observation filter's state that came with the weights waits for the next
fragment, so a fragment is normalized one way throughout. The runners of asynchronous
algorithms sample a fragment ahead on their sample channel
(`ftrl.rl.sampling.sample_plane`), so a push usually finds them busy; without the inbox
the driver would wait out a fragment for every push, and without the loads between
steps a fragment sampled ahead would act on weights an update older throughout.
"""

from __future__ import annotations

import threading

import numpy as np

#: (version, flat weights or None when already loaded, observation filter state or None)
Weights = tuple[int, np.ndarray | None, dict | None]


class WeightsInbox:
    """The last weights that arrived while the runner was busy (one slot: the driver's
    latest push wins, as with an idle runner; a restored driver may push a lower version)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: Weights | None = None

    @property
    def has_weights(self) -> bool:
        """Whether flat weights wait (read without the lock: the sampling loop asks every
        step, and a push seen a step late is loaded then)."""
        waiting = self._waiting
        return waiting is not None and waiting[1] is not None

    def put(self, version: int, weights: np.ndarray, filter_state: dict | None) -> None:
        with self._lock:
            self._waiting = (int(version), weights, filter_state)

    def take(self) -> Weights | None:
        """What waits (emptying the inbox), or None."""
        with self._lock:
            waiting, self._waiting = self._waiting, None
            return waiting

    def take_weights(self) -> tuple[int, np.ndarray] | None:
        """The waiting (version, flat weights), or None; a filter state stays for `take`."""
        with self._lock:
            if self._waiting is None or self._waiting[1] is None:
                return None
            version, weights, filter_state = self._waiting
            self._waiting = (version, None, filter_state) if filter_state is not None else None
            return version, weights
