"""LearnerMesh: the learner group's mesh epochs, a part of its own.

    mesh = LearnerMesh(client, "job/learner", pinned=group.pinned, health=health, ...)
    view = mesh.ready_view(committed)        # a mesh epoch entered, >= min_learners members
    results, errors = mesh.call_all(view["members"], "update", args_for=args)
    mesh.after_failed_step(view, errors)     # that epoch is not used again

Membership is the coordinator's mesh epoch (`get_mesh`, `form_mesh`), not the group's
slots: a member is called on the incarnation the epoch names (a strict handle,
`pinned`). At each step boundary (`ready_view`) the first epoch is formed once
`n_init` learners joined, later joiners are admitted, and planned removals leave.
Below `min_learners` training pauses (runners idle, nothing lost) for up to the wait
timeout. A new epoch is entered by every member at once (`enter`): the first member
holding the committed version (`CommittedState`, the group's) is the source of a
broadcast of model, optimizer state and counters over the new group; a state to
restore (a checkpoint, an exploit, weights of a lost mesh) is loaded into the first
member first. An epoch is entered at most once: a failed attempt opens a new one (its
store keys are spent). A member's death is seen by the coordinator, which opens the
next epoch at once; a hung member (collective timeout, no answer to pings) is evicted
here.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ftrl.rl.actor_group import ActorGroup
from ftrl.rl.learning.learner_health import (
    LearnerGroupError,
    LearnerHealth,
    LearnerWaitTimeout,
    NoLearnerAnswered,
    remote_kind,
)
from ftrl.wire.errors import (
    ActorDiedError,
    ActorUnavailableError,
    FtrlError,
    FtrlTimeoutError,
    StaleIncarnationError,
)

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
#: Attempts of one update at most, whatever failed: a mesh whose collectives keep failing
#: without anyone dying (a blocked port between hosts) ends the run with an error
#: instead of retrying forever.
MAX_UPDATE_ATTEMPTS = 25
GRACE_S = 5.0
LEARNER_START_TIMEOUT_S = 300.0


@dataclass
class CommittedState:
    """The learner state the group stands for: the committed weights version, and what
    the next epoch's source loads when the members do not hold it."""

    version: int = 0
    #: a learner state the next epoch's source loads (a checkpoint, an exploit)
    restore_state: dict[str, Any] | None = None
    #: loaded only when no live member holds `version` (a resumed driver: resume_at)
    fallback_state: dict[str, Any] | None = None
    #: the next epoch's source loads `latest_weights` (fresh optimizer state)
    restore_weights: bool = False
    #: (version, flat weights) as last read or set
    latest_weights: tuple[int, np.ndarray] | None = None

    def take_fallback(self, group: str) -> None:
        """No member holds the version to continue at: load the fallback state."""
        state = self.fallback_state
        assert state is not None
        self.fallback_state = None
        version = int(state["version"])
        if version != self.version:
            log.warning("learner mesh %s: no learner holds version %d and no saved state has it: continuing "
                        "from the saved learner state of version %d", group, self.version, version)
        self.restore_state = state
        self.version = version

    def entered(self) -> None:
        """An epoch was entered with this state: nothing is left to load."""
        self.restore_state = None
        self.fallback_state = None
        self.restore_weights = False


class LearnerMesh:
    """The mesh epochs of one learner group (module docstring).

    Args:
        client: the coordinator's mesh calls (`get_mesh`, `form_mesh`).
        group: the group's name (`JOB/learner`).
        pinned: a strict handle on (name, incarnation) (`ActorGroup.pinned`).
        health: the group's failure bookkeeping (counts evictions, re-formations, failures).
        n_init: members the first epoch of this driver waits for.
        min_learners: members later epochs go on with.
        wait_timeout_s: how long training pauses below them (`learner_wait_timeout_s`).
        collective_timeout_s: a member making no progress this long is probed.
        call_timeout_s: bound of whole-state calls on one member.
        poll_starts: called at each try (the group collects learners that started).
        apply_scale: the group's planned size applied to a view (a step boundary).
        first_epoch_timeout_s: the first epoch's wait (learners start, import torch, connect).
    """

    def __init__(self, client: Any, group: str, *, pinned: Callable[[str, int], Any], health: LearnerHealth,
                 n_init: int, min_learners: int, wait_timeout_s: float, collective_timeout_s: float,
                 call_timeout_s: float, poll_starts: Callable[[], None] = lambda: None,
                 apply_scale: Callable[[dict[str, Any]], dict[str, Any]] = lambda view: view,
                 first_epoch_timeout_s: float = LEARNER_START_TIMEOUT_S) -> None:
        self.client = client
        self.group = group
        self._pinned = pinned
        self.health = health
        self.n_init = n_init
        self.min_learners = min_learners
        self.wait_timeout_s = wait_timeout_s
        self.collective_timeout_s = collective_timeout_s
        self.call_timeout_s = call_timeout_s
        self._poll_starts = poll_starts
        self._apply_scale = apply_scale
        self.first_epoch_timeout_s = first_epoch_timeout_s
        self.view: dict[str, Any] = {"epoch": 0, "members": [], "waiting": []}
        self.entered_epoch = 0
        self.spent: set[int] = set()  # epochs never to enter (again): their store keys are used
        #: this group (driver) entered an epoch already
        self.entered_any = False
        self.last_reform_s = 0.0
        self.backend = self.device = ""  # the mesh's, as its members reported on entering

    def attach(self) -> None:
        """Learners of a previous driver may still be up: the epoch they are in was
        entered by that driver, so it is spent for this one."""
        epoch = self.client.get_mesh(self.group)["epoch"]
        if epoch:
            self.spent.add(epoch)

    # ------------------------------------------------------------------ calls on members

    def handle(self, member: dict[str, Any]) -> Any:
        """A strict handle on the incarnation the epoch names (StaleIncarnationError when
        the coordinator knows a newer copy: this member is on its way out)."""
        return self._pinned(member["name"], int(member["incarnation"]))

    def submit(self, members: list[dict[str, Any]], method: str, *args: Any, timeout: float | None = None,
               args_for: dict[str, tuple] | None = None) -> tuple[dict[str, cf.Future], dict[str, BaseException]]:
        """Start `method` on every member (`args_for`: per-member args by name), each on
        the incarnation its epoch names: (futures, errors so far) by name."""
        handles: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        for m in members:
            try:
                handles[m["name"]] = self.handle(m)
            except FtrlError as e:
                errors[m["name"]] = e
        futs, submit_errors = ActorGroup.submit_all(handles, method, *args, timeout=timeout, args_for=args_for)
        errors.update(submit_errors)
        return futs, errors

    def call_all(self, members: list[dict[str, Any]], method: str, *args: Any, timeout: float | None = None,
                 args_for: dict[str, tuple] | None = None) -> tuple[dict[str, Any], dict[str, BaseException]]:
        """Call `method` on every member in parallel (`args_for`: per-member args by name);
        (results, errors) by name. Waits as `gather` says."""
        futs, errors = self.submit(members, method, *args, timeout=timeout, args_for=args_for)
        results = self.gather(futs, errors, members)
        return results, errors

    def gather(self, futs: dict[str, cf.Future], errors: dict[str, BaseException],
               members: list[dict[str, Any]]) -> dict[str, Any]:
        """Wait for every call; after the first failure the rest get GRACE_S (a death
        wakes them through the coordinator at once); those still silent, and members
        that made no progress for a collective timeout, are probed and evicted if hung."""
        results: dict[str, Any] = {}
        pending = dict(futs)
        grace_until = float("inf")
        quiet_since = time.monotonic()
        while pending:
            now = time.monotonic()
            timeout = min(grace_until, quiet_since + self.collective_timeout_s + GRACE_S) - now
            done, _ = cf.wait(list(pending.values()), timeout=max(0.0, timeout), return_when=cf.FIRST_COMPLETED)
            if done:
                quiet_since = time.monotonic()
            for name, fut in list(pending.items()):
                if fut not in done:
                    continue
                del pending[name]
                try:
                    results[name] = fut.result()
                except FtrlError as e:
                    errors[name] = e
                    grace_until = min(grace_until, time.monotonic() + GRACE_S)
            if pending and time.monotonic() >= min(grace_until, quiet_since + self.collective_timeout_s + GRACE_S):
                by_name = {m["name"]: m for m in members}
                hung = self.probe([by_name[n] for n in pending])
                for name in list(pending):
                    if name in hung or grace_until != float("inf"):
                        pending.pop(name).cancel()
                        errors[name] = hung.get(name) or FtrlTimeoutError(f"{name} did not return")
                quiet_since = time.monotonic()
        return results

    def probe(self, members: list[dict[str, Any]]) -> dict[str, BaseException]:
        """Ping members (PROBE_TIMEOUT_S); evict the ones that do not answer. Returns them."""
        futs, hung = self.submit(members, "ping", timeout=PROBE_TIMEOUT_S)
        ActorGroup.gather(futs, hung, wait_s=PROBE_TIMEOUT_S + 1)
        if hung:
            log.warning("learner mesh %s: evicting unresponsive %s", self.group, sorted(hung))
            self.health.num_learners_evicted += len(hung)
            try:
                epoch = self.client.get_mesh(self.group)["epoch"]
                self.client.form_mesh(self.group, epoch, 1, remove=sorted(hung),
                                      reason=f"unresponsive: {', '.join(sorted(hung))}")
            except FtrlError as e:
                log.warning("evicting %s failed: %s", sorted(hung), e)
        return hung

    def from_any_member(self, method: str, *args: Any) -> Any:
        """Call a read-only method on rank 0, falling back to the other members. Raises
        NoLearnerAnswered (with each member's error) when none answers."""
        errors: dict[str, BaseException] = {}
        for m in self.view.get("members", []):
            try:
                return self.handle(m).options(timeout=self.call_timeout_s).call(method, *args)
            except FtrlError as e:
                errors[m["name"]] = e
        raise NoLearnerAnswered(method, errors)

    # ------------------------------------------------------------------ epochs

    def ready_view(self, committed: CommittedState) -> dict[str, Any]:
        """A mesh epoch this driver entered, with at least min_learners members. Admits
        joiners and applies scaling first (this is a step boundary). Pauses below
        min_learners, up to the wait timeout (the very first epoch: up to
        first_epoch_timeout_s); at most MAX_UPDATE_ATTEMPTS failed entries in a row.
        While the coordinator is away the epoch already entered goes on; anything else
        waits for it, within the same bound."""
        wait = self.wait_timeout_s if self.entered_any else max(self.wait_timeout_s, self.first_epoch_timeout_s)
        deadline = time.monotonic() + wait
        waiting_logged = False
        failed_entries = 0
        why = "no mesh view yet"
        while True:
            self._poll_starts()
            if time.monotonic() >= deadline:
                raise LearnerWaitTimeout(f"learner mesh {self.group} not ready within {wait:g}s "
                                         f"(learner_wait_timeout_s): {why}")
            try:
                view = self._apply_scale(self.client.get_mesh(self.group))
                self.health.note_view(view)
                epoch, members, waiting = view["epoch"], view["members"], view["waiting"]
                # this driver's first epoch waits for n_init learners; later ones go on with min_learners
                need = self.min_learners if self.entered_any else self.n_init
                why = (f"{len(members)} of the {need} learners it needs; members: "
                       f"{[m['name'] for m in members]}, waiting: {[m['name'] for m in waiting]}")
                spent = epoch in self.spent
                if (epoch == 0 or waiting or spent) and len(members) + len(waiting) >= need:
                    formed = self.client.form_mesh(
                        self.group, epoch, need, reform=spent,
                        reason="initial" if epoch == 0 else "joiners admitted" if waiting else "re-formed")
                    if formed["epoch"] != epoch:
                        continue
                if epoch > 0 and not spent and len(members) >= need:
                    if epoch == self.entered_epoch or self.enter(view, committed):
                        return view
                    failed_entries += 1
                    if failed_entries >= MAX_UPDATE_ATTEMPTS:
                        raise LearnerGroupError(f"learner mesh {self.group}: {failed_entries} epochs in a row "
                                                f"could not be entered (see the log for why)")
                    continue
                if not waiting_logged:
                    log.warning("learner mesh %s: %d members, %d waiting, need %d: training pauses",
                                self.group, len(members), len(waiting), need)
                    waiting_logged = True
                self.client.get_mesh(self.group, after_seq=view["seq"],
                                     wait_s=min(5.0, max(0.05, deadline - time.monotonic())))
            except (ActorUnavailableError, FtrlTimeoutError) as e:
                # the coordinator is away: the data plane does not need it. Go on in the
                # epoch we are in; anything else waits for it to come back.
                if self.entered_epoch and self.entered_epoch not in self.spent:
                    return self.view
                why = f"the coordinator is unreachable and the mesh must re-form: {e}"
                log.warning("learner mesh %s: coordinator unreachable (%s); waiting", self.group, e)
                time.sleep(1.0)

    def enter(self, view: dict[str, Any], committed: CommittedState) -> bool:
        """Every member enters `view`'s epoch and takes the committed state from a source."""
        epoch, members = view["epoch"], view["members"]
        self.spent.add(epoch)  # whatever happens, this epoch's keys are used from now on
        t0 = time.monotonic()
        states, errors = self.call_all(members, "mesh_state", timeout=PROBE_TIMEOUT_S)
        if errors:
            log.info("learner mesh %s epoch %d: members failed before entering: %s", self.group, epoch,
                     {n: remote_kind(e) for n, e in errors.items()})
            self.health.note_failures(errors)
            return False
        first_state = states[members[0]["name"]]
        self.backend, self.device = first_state.get("backend", ""), first_state.get("device", "")
        source = next((i for i, m in enumerate(members) if committed.version in states[m["name"]]["versions"]), None)
        if source is None and committed.restore_state is None and committed.fallback_state is not None:
            committed.take_fallback(self.group)
        restored = source is None or committed.restore_state is not None or committed.restore_weights
        if restored:
            source = 0
            if committed.restore_state is None and committed.latest_weights is None:
                raise LearnerGroupError(f"no learner holds version {committed.version} and there is no state "
                                        "to restore")
            first = self.handle(members[0]).options(timeout=self.call_timeout_s)
            try:
                if committed.restore_state is not None:
                    log.warning("learner mesh %s: loading the checkpointed learner state (version %d) into %s",
                                self.group, committed.version, members[0]["name"])
                    first.call("set_state", committed.restore_state, committed.version)
                else:
                    assert committed.latest_weights is not None
                    log.warning("learner mesh %s: no member holds version %d (all learners were lost): "
                                "continuing from the last published weights with fresh optimizer state",
                                self.group, committed.version)
                    first.call("set_weights", committed.version, committed.latest_weights[1])
            except FtrlError as e:
                log.info("learner mesh %s epoch %d: loading the state into %s failed: %s", self.group, epoch,
                         members[0]["name"], e)
                self.health.note_failures({members[0]["name"]: e})
                return False
        # survivors holding the committed version are bit-identical: only joiners (or a
        # restored state) need the broadcast
        sync = restored or not all(committed.version in states[m["name"]]["versions"] for m in members)
        _, errors = self.call_all(members, "enter_epoch", view, committed.version, source, sync,
                                  timeout=self.collective_timeout_s * 3 + 30)
        if errors:
            log.info("learner mesh %s: entering epoch %d failed: %s", self.group, epoch,
                     {n: f"{remote_kind(e)}: {str(e)[:120]}" for n, e in errors.items()})
            self.health.note_failures(errors)
            return False
        self.spent.discard(epoch)
        self.entered_epoch = epoch
        self.view = view
        committed.entered()
        self.entered_any = True
        self.health.num_reformations += 1
        self.last_reform_s = time.monotonic() - t0
        log.info("learner mesh %s: epoch %d entered by %d members in %.3fs (%s, version %d)",
                 self.group, epoch, len(members), self.last_reform_s,
                 f"state from rank {source}" if sync else "no state sync needed", committed.version)
        return True

    def after_failed_step(self, view: dict[str, Any], errors: dict[str, BaseException]) -> None:
        """The epoch that failed a step is not used again: a member's death makes the
        coordinator open the next one (wait briefly for it); otherwise the next step
        re-forms with the same members."""
        died = any(isinstance(e, (ActorDiedError, ActorUnavailableError, StaleIncarnationError))
                   for e in errors.values())
        deadline = time.monotonic() + (3.0 if died else 0.0)
        try:
            now = self.client.get_mesh(self.group)
            while now["epoch"] == view["epoch"] and time.monotonic() < deadline:
                now = self.client.get_mesh(self.group, after_seq=now["seq"],
                                           wait_s=max(0.05, deadline - time.monotonic()))
        except (ActorUnavailableError, FtrlTimeoutError):
            self.spent.add(view["epoch"])  # re-form once the coordinator is back
            return
        if now["epoch"] == view["epoch"]:
            self.spent.add(view["epoch"])

    def leave_epoch(self) -> None:
        """The next step re-forms: its source loads what was just set."""
        if self.entered_epoch:
            self.spent.add(self.entered_epoch)
            self.entered_epoch = 0

    def digests(self) -> dict[str, str]:
        """{member: sha256 of its state} for the current epoch (bit-identity checks)."""
        return self.call_all(self.view.get("members", []), "digest", timeout=30.0)[0]
