"""experiment.json as a running tuner keeps it: read once when the tuner starts, then
rewritten whole and atomically at every save, before any decision is acted on, so an
incarnation restarted in place carries on where the last one stopped.

`ExperimentStore` owns the dict and counts the saves: `ftrl.Tuner` follows the tuner
through `wait_for_save` (a save, or the tuner's end, wakes it). What each part of the
tuner keeps (the trials, the counters, PBT's state, the exploits' pending decisions and
skips) comes in with each `save`. Imports no torch and no client.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ftrl.tune.experiment import read_state, write_state

#: The longest a status waiter is kept waiting in one call.
MAX_WAIT_S = 60.0


class ExperimentStore:
    """The experiment's state (experiment.json of `expdir`) and its saves.

    `state` is the whole dict: the spec and what the tuner itself keeps (status,
    started_at, error) are read and set on it directly.
    """

    def __init__(self, expdir: str | Path):
        self.expdir = Path(expdir)
        self.state: dict[str, Any] = read_state(self.expdir)
        self._cond = threading.Condition()
        self._seq = 0
        self._closed = False

    def save(self, **sections: Any) -> None:
        """Set `sections` on the state and write it (atomically); waiters wake."""
        self.state.update(sections)
        write_state(self.expdir, self.state)
        with self._cond:
            self._seq += 1
            self._cond.notify_all()

    @property
    def seq(self) -> int:
        """How many saves this incarnation made."""
        with self._cond:
            return self._seq

    def close(self) -> None:
        """The last save was made (the tuner ended or drained): every waiter wakes for good."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        with self._cond:
            return self._closed

    def wait_for_save(self, after_seq: int, timeout_s: float) -> None:
        """Return once a save past `after_seq` was made or the store closed, or after
        `timeout_s` (at most MAX_WAIT_S)."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > after_seq or self._closed,
                                timeout=min(max(0.0, timeout_s), MAX_WAIT_S))

    def wait_closed(self, timeout_s: float) -> bool:
        """Whether the store closed within `timeout_s`."""
        with self._cond:
            return self._cond.wait_for(lambda: self._closed, timeout=max(0.0, timeout_s))
