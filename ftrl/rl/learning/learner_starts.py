"""LearnerStarts: the learners of a group being created, and created again after a
failed start, a part of its own.

    starts = LearnerStarts("job/learner", create_all=group.create_all, on_started=adopt)
    starts.begin(slots)      # create in the background
    starts.poll(slots)       # at each step boundary: collect what finished

A learner whose start failed (its constructor raised, its host died while starting) is
created again after a growing pause (0.5 s * 2^failures, at most 10 s), up to
MAX_START_FAILURES times in a row, then the run ends with its error. One the mesh
refused (another config hash) ends the run at once: creating it again cannot help.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable
from typing import Any

from ftrl.rl.learning.learner_health import LearnerGroupError
from ftrl.wire.errors import FtrlError

log = logging.getLogger(__name__)

#: Start failures of one learner in a row (a constructor that raised, a host that died
#: while starting) before the run ends; between them, a growing pause.
MAX_START_FAILURES = 5


class LearnerStarts:
    """Creations in flight and the retries of failed ones (module docstring).

    Args:
        group: the group's name, for logs.
        create_all: starts creating slots in the background: {name: future} (`ActorGroup.create_all`).
        on_started: called with the name of each learner whose creation finished.
        clock: the monotonic clock the pauses are measured with.
    """

    def __init__(self, group: str, create_all: Callable[[list[Any]], dict[str, cf.Future]],
                 on_started: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.group = group
        self._create_all = create_all
        self._on_started = on_started
        self._clock = clock
        self._creating: dict[str, cf.Future] = {}  # learners being created, by name
        #: failed starts in a row, by name
        self.start_failures: dict[str, int] = {}
        #: learners to create again, and when
        self.recreate_at: dict[str, float] = {}

    def begin(self, slots: list[Any]) -> None:
        """Start creating `slots` (in the background)."""
        self._creating.update(self._create_all(slots))

    def creating(self, name: str) -> bool:
        """Whether learner `name` is being created."""
        return name in self._creating

    def cancel(self, name: str) -> None:
        """Learner `name` is gone (scaled away): its creation is not waited for."""
        fut = self._creating.pop(name, None)
        if fut is not None:
            fut.cancel()

    def poll(self, slots: list[Any]) -> None:
        """Collect finished creations; a learner whose start failed (not refused) is
        created again after a pause, up to MAX_START_FAILURES times in a row. `slots`:
        the group's slots now (one scaled away meanwhile is not created again)."""
        now = self._clock()
        for name, when in list(self.recreate_at.items()):
            slot = next((s for s in slots if s.name == name), None)
            if slot is None:  # scaled away meanwhile
                del self.recreate_at[name]
            elif when <= now and name not in self._creating:
                del self.recreate_at[name]
                log.info("learner group %s: creating %s again", self.group, name)
                self.begin([slot])
        for name, fut in list(self._creating.items()):
            if not fut.done():
                continue
            del self._creating[name]
            try:
                fut.result()
                self._on_started(name)
            except FtrlError as e:
                if "refused" in str(e) or "config hash" in str(e):
                    log.error("learner %s failed to start: %s", name, e)
                    raise LearnerGroupError(f"learner {name} was refused by the mesh: {e}") from e
                failures = self.start_failures.get(name, 0) + 1
                self.start_failures[name] = failures
                if failures >= MAX_START_FAILURES:
                    raise LearnerGroupError(f"learner {name} failed to start {failures} times in a row; "
                                            f"last: {e}") from e
                pause = min(10.0, 0.5 * 2 ** failures)
                log.warning("learner %s failed to start (%d of %d): %s; creating it again in %.1fs",
                            name, failures, MAX_START_FAILURES, e, pause)
                self.recreate_at[name] = now + pause
            else:
                self.start_failures.pop(name, None)
