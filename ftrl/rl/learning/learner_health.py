"""LearnerHealth: the learner group's failure bookkeeping, a part of its own.

    health = LearnerHealth("job/learner", actor_info=client.actor)
    health.adopt("job/learner/0", incarnation=3, runtime_restarts=2)   # created or re-attached
    health.note_view(view)          # a mesh view: members under a newer incarnation restarted
    health.note_failures(errors)    # failed calls: count the learners' own failures
    health.get_counters()           # what a driver state keeps (set_counters takes it back)

Counted (cumulative, in every metrics row and driver state): mesh re-formations, update
retries, evicted (hung) learners, learner restarts (incarnation changes: what the
runtime counted since last seen, at least one) and learner failures (failed calls that
were a learner's own, not a peer's failure seen from a survivor; every restart is one).
A learner that restarted while no driver watched (`remember_previous`: what the
previous driver's state knew) counts as restarted and failed once. A learner whose own
code keeps raising ends the run after MAX_CONSECUTIVE_FAILURES failed steps in a row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ftrl.wire.errors import ActorError, FtrlError

log = logging.getLogger(__name__)

#: errors a member raises when another member failed (not its own fault)
COLLATERAL = ("MeshChanged", "PeerLost", "CollectiveTimeout")
MAX_CONSECUTIVE_FAILURES = 20


class LearnerGroupError(FtrlError):
    """The learner mesh cannot go on (out of learners, out of time, a failing learner)."""


class LearnerWaitTimeout(LearnerGroupError):
    """Fewer than min_learners for longer than learner_wait_timeout_s."""


class NoLearnerAnswered(LearnerGroupError):
    """No member of the epoch answered a read (`errors`: each member's error)."""

    def __init__(self, method: str, errors: dict[str, BaseException]) -> None:
        detail = ", ".join(f"{n}: {remote_kind(e)}" for n, e in sorted(errors.items())) or "no members"
        super().__init__(f"no learner answered {method} ({detail})")
        self.errors = errors


def own_failure(error: BaseException) -> bool:
    """Whether a member's failed call was its own failure, not a peer's seen from it."""
    if isinstance(error, ActorError):
        return remote_kind(error) not in COLLATERAL
    return isinstance(error, FtrlError)


def remote_kind(error: BaseException) -> str:
    """The short type name of what a member raised."""
    if isinstance(error, ActorError):
        return error.remote_type.rsplit(".", 1)[-1]
    return type(error).__name__


class LearnerHealth:
    """Counters, incarnations and the failure streak of one learner group (module docstring).

    Args:
        group: the group's name (`JOB/learner`), for logs.
        actor_info: the coordinator's record of an actor by name (`client.actor`): its
            "restarts" is the runtime's restart count.
    """

    #: counter attribute -> its key in results (stats) and metrics rows
    COUNTERS = {
        "num_reformations": "num_learner_reformations",
        "num_update_retries": "num_learner_update_retries",
        "num_learners_evicted": "num_learners_evicted",
        "num_learner_restarts": "num_learner_restarts",
        "num_learner_failures": "num_learner_failures",
    }

    def __init__(self, group: str, actor_info: Callable[[str], dict[str, Any]]) -> None:
        self.group = group
        self._actor_info = actor_info
        self.num_reformations = 0
        self.num_update_retries = 0
        self.num_learners_evicted = 0
        self.num_learner_restarts = 0  # incarnation changes of learners
        self.num_learner_failures = 0  # failed calls that were a learner's own (not collateral)
        self._incarnations: dict[str, tuple[int, int]] = {}  # name -> (incarnation, runtime restarts)
        self._previous: dict[str, tuple[int, int]] = {}  # what a previous driver knew (remember_previous)
        self._failed: set[str] = set()  # learners whose own failure was counted since their last restart
        self._consecutive_failures = 0

    # ------------------------------------------------------------------ incarnations

    def adopt(self, name: str, incarnation: int, runtime_restarts: int) -> None:
        """A learner was created or re-attached: count it as restarted when this or a
        previous driver knew another incarnation of it, then follow it."""
        previous = self._previous.pop(name, None)
        before = previous or self._incarnations.get(name)
        if before is not None and incarnation != before[0]:
            self._count_restart(name, before, incarnation, runtime_restarts, away=previous is not None)
        self._incarnations[name] = (incarnation, runtime_restarts)

    def note_view(self, view: dict[str, Any]) -> None:
        """Count each learner the mesh shows under a newer incarnation than last seen."""
        for m in [*view.get("members", []), *view.get("waiting", [])]:
            name, incarnation = str(m["name"]), int(m["incarnation"])
            before = self._incarnations.get(name)
            if before is None or incarnation <= before[0]:
                continue
            try:
                restarts = int(self._actor_info(name).get("restarts", before[1] + 1))
            except FtrlError:
                restarts = before[1] + 1  # the coordinator is away: at least one restart
            self._count_restart(name, before, incarnation, restarts, away=False)
            self._incarnations[name] = (incarnation, restarts)

    def _count_restart(self, name: str, before: tuple[int, int], incarnation: int, restarts: int,
                       away: bool) -> None:
        """Count a learner's restarts since `before` (the runtime's count, at least one);
        `away`: it restarted while no driver watched, so its failure was not counted
        either."""
        n = max(1, restarts - before[1])
        self.num_learner_restarts += n
        # every restart was a failure; the driver saw (and counted) at most one of them
        self.num_learner_failures += n - (0 if away or name not in self._failed else 1)
        self._failed.discard(name)
        log.info("learner %s restarted (incarnation %d -> %d%s): counted %d", name, before[0], incarnation,
                 ", while the driver was away" if away else "", n)

    def known_incarnations(self) -> list[dict[str, Any]]:
        """The incarnation of each learner as last seen, with the runtime's restart count
        then (a driver state holds them; `remember_previous` takes them back)."""
        return [{"name": name, "incarnation": inc, "restarts": restarts}
                for name, (inc, restarts) in sorted(self._incarnations.items())]

    def remember_previous(self, previous: list[dict[str, Any]], attached: Iterable[tuple[str, int, int]] = ()) -> None:
        """What a previous driver knew of the learners (`known_incarnations`): a learner
        re-attached under another incarnation counts as restarted and failed. `attached`:
        (name, incarnation, runtime restarts) of the learners already re-attached before
        this was known; they are adopted again."""
        self._previous = {str(p["name"]): (int(p.get("incarnation", 0)), int(p.get("restarts", 0)))
                          for p in previous if isinstance(p, dict) and "name" in p}
        for name, incarnation, restarts in attached:
            self._incarnations.pop(name, None)
            self.adopt(name, incarnation, restarts)

    # ------------------------------------------------------------------ failures

    def note_failures(self, errors: dict[str, BaseException]) -> None:
        """Count the learners whose call failed by their own fault (died, unreachable,
        hung, raised; not a peer's failure seen from a survivor); raise on user-code
        failures of one learner too many times in a row."""
        own_failures = {n: e for n, e in errors.items() if own_failure(e)}
        self.num_learner_failures += len(own_failures)
        self._failed.update(own_failures)
        own = {n: e for n, e in own_failures.items() if isinstance(e, ActorError)}  # its code raised
        if not own:
            return
        self._consecutive_failures += 1
        if self._consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
            name, error = next(iter(own.items()))
            raise LearnerGroupError(
                f"learner {name} failed {self._consecutive_failures} times in a row: {error}") from error

    def step_committed(self) -> None:
        """An update committed: the failure streak starts again."""
        self._consecutive_failures = 0

    # ------------------------------------------------------------------ counters

    def get_counters(self) -> dict[str, int]:
        """The cumulative counters (a driver state holds them)."""
        return {attr: int(getattr(self, attr)) for attr in self.COUNTERS}

    def set_counters(self, counters: dict[str, Any]) -> None:
        """Continue from saved counters (added to what happened since this group began)."""
        for attr in self.COUNTERS:
            if isinstance(counters.get(attr), int):
                setattr(self, attr, getattr(self, attr) + int(counters[attr]))

    @classmethod
    def counters_from_row(cls, row: dict[str, Any]) -> dict[str, int]:
        """The counters a metrics row shows, in `get_counters` form."""
        return {attr: int(row[key]) for attr, key in cls.COUNTERS.items() if isinstance(row.get(key), int)}

    def stats(self) -> dict[str, int]:
        """The counters under their metrics-row keys."""
        return {key: int(getattr(self, attr)) for attr, key in self.COUNTERS.items()}
