"""ActorGroup: named actors of one kind, created and called together.

What the env-runner group (`rl.runner_group`) and the learner group (`rl.learner_group`)
share, below their policies:

- names: actor `I` of a group is `JOB/KIND/I`;
- creation through the cluster client (`create_actor(..., get_if_exists=True)`, so a
  driver that comes back re-attaches to the actors still up), in parallel on the
  group's thread pool;
- strict handles: a slot's handle, and `pinned(name, incarnation)`, never follow a
  restart by themselves, so a call never lands on an incarnation the caller did not
  expect (it raises StaleIncarnationError instead);
- calling one method on many actors at once (`submit_all`, `gather`, `call_all`), every
  wait bounded by the calls' own timeout or by `wait_s`;
- per-slot failure bookkeeping (consecutive failures, restarts, last error);
- teardown: `stop(kill=True)` kills every actor of the group, tolerant of a client
  that is closing.

What a failure *means* (restart, drop, re-form a mesh) is the subclasses' business.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from dataclasses import dataclass
from typing import Any

from ftrl.wire.errors import ActorError, FtrlError, FtrlTimeoutError, StaleIncarnationError

log = logging.getLogger(__name__)


@dataclass
class ActorSlot:
    """One actor of a group: its name, the strict handle it was reached by, and how it fared."""

    index: int
    name: str
    handle: Any = None  # strict: pinned to `incarnation` (see ActorGroup.create)
    incarnation: int = 0
    consecutive_failures: int = 0
    restarts: int = 0
    runtime_restarts: int = 0  # the runtime's restart count of the actor, as last adopted
    last_error: str = ""


class ActorGroup:
    """Actors `GROUP/I` of one class; subclasses add the slots and the failure policy."""

    def __init__(
        self,
        client: Any,
        *,
        group: str,
        actor_class: str,
        actor_kwargs: dict[str, Any],
        max_restarts: int,
        resources: dict[str, float],
        create_options: dict[str, Any] | None = None,
        pool_size: int,
        pool_name: str,
    ):
        self.client = client
        self.group = group  # "JOB/KIND"
        self.actor_class = actor_class
        self.max_restarts = max_restarts
        self._actor_kwargs_base = actor_kwargs
        self._resources = resources
        self._create_options = dict(create_options or {})
        self._pool = cf.ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix=pool_name)
        self._pool_size = pool_size
        self._pool_name = pool_name
        self._pinned: dict[tuple[str, int], Any] = {}
        self.slots: list[Any] = []  # ActorSlot or a subclass of it

    # ------------------------------------------------------------------ creation

    def actor_name(self, i: int) -> str:
        return f"{self.group}/{i}"

    def actor_kwargs(self, slot: ActorSlot) -> dict[str, Any]:
        """The constructor kwargs of `slot`'s actor (subclasses add per-slot ones)."""
        return self._actor_kwargs_base

    def create(self, slot: ActorSlot) -> None:
        """Create (or re-attach to) `slot`'s actor; blocks until it serves or failed."""
        handle = self.client.create_actor(
            self.actor_class,
            name=slot.name,
            kwargs=self.actor_kwargs(slot),
            max_restarts=self.max_restarts,
            resources=self._resources,
            get_if_exists=True,
            **self._create_options,
        )
        # A strict handle never follows a restart by itself: a restarted actor answers
        # StaleIncarnationError until the owner decided to adopt it (`wait_alive`).
        slot.handle = handle.options(strict=True)
        slot.incarnation = getattr(slot.handle, "incarnation", 0)
        slot.runtime_restarts = getattr(slot.handle, "restarts", 0)

    def ensure_pool(self, size: int) -> None:
        """Room for `size` background calls at once (a group that grew): a bigger pool
        takes new work; calls already on the old one finish there."""
        if size <= self._pool_size:
            return
        old = self._pool
        self._pool = cf.ThreadPoolExecutor(max_workers=size, thread_name_prefix=self._pool_name)
        self._pool_size = size
        old.shutdown(wait=False)

    def create_all(self, slots: list[ActorSlot]) -> dict[str, cf.Future]:
        """Start creating `slots` in parallel on the pool: {name: future of `create`}."""
        return {slot.name: self._pool.submit(self.create, slot) for slot in slots}

    def pinned(self, name: str, incarnation: int) -> Any:
        """A strict handle on incarnation `incarnation` of `name` (cached). Raises
        StaleIncarnationError when the cluster already knows a newer one."""
        key = (name, int(incarnation))
        handle = self._pinned.get(key)
        if handle is None:
            handle = self.client.get_actor(name, strict=True)
            if handle.incarnation != key[1]:
                raise StaleIncarnationError(f"{name} is incarnation {handle.incarnation}, not {key[1]}")
            self._pinned = {k: v for k, v in self._pinned.items() if k[0] != name}
            self._pinned[key] = handle
        return handle

    # ------------------------------------------------------------------ calls

    @staticmethod
    def submit_all(
        handles: dict[str, Any],
        method: str,
        *args: Any,
        timeout: float | None = None,
        args_for: dict[str, tuple] | None = None,
        **kwargs: Any,
    ) -> tuple[dict[str, cf.Future], dict[str, BaseException]]:
        """Start `method` on every handle at once ({name: handle}), each call bounded by
        `timeout` when given; `args_for` gives some names their own positional args.
        Returns (futures, errors raised while submitting), by name."""
        futs: dict[str, cf.Future] = {}
        errors: dict[str, BaseException] = {}
        for name, handle in handles.items():
            try:
                if timeout is not None:
                    handle = handle.options(timeout=timeout)
                call_args = args_for[name] if args_for is not None and name in args_for else args
                futs[name] = handle.submit(method, *call_args, **kwargs)
            except FtrlError as e:
                errors[name] = e
        return futs, errors

    @staticmethod
    def gather(futs: dict[str, cf.Future], errors: dict[str, BaseException],
               wait_s: float | None = None) -> dict[str, Any]:
        """Wait for every call; results by name, failures added to `errors`. With `wait_s`,
        calls still running after that long are cancelled and fail with FtrlTimeoutError."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        results: dict[str, Any] = {}
        for name, fut in futs.items():
            try:
                results[name] = fut.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except FtrlError as e:  # before TimeoutError: FtrlTimeoutError is one
                errors[name] = e
            except cf.TimeoutError:
                fut.cancel()
                errors[name] = FtrlTimeoutError(f"{name}: no answer in {wait_s:g}s")
        return results

    def call_all(self, handles: dict[str, Any], method: str, *args: Any, timeout: float | None = None,
                 **kwargs: Any) -> tuple[dict[str, Any], dict[str, BaseException]]:
        """`method` on every handle in parallel, each bounded by `timeout`: (results, errors) by name."""
        futs, errors = self.submit_all(handles, method, *args, timeout=timeout, **kwargs)
        return self.gather(futs, errors), errors

    # ------------------------------------------------------------------ failures

    @staticmethod
    def note_failure(slot: ActorSlot, error: BaseException, what: str) -> str:
        """Book a failed call on `slot`; returns the error's description."""
        text = describe_error(error)
        slot.last_error = f"{what}: {text}"
        slot.consecutive_failures += 1
        return text

    # ------------------------------------------------------------------ teardown

    def kill(self, name: str, reason: str = "") -> None:
        """Kill actor `name` for good (no restart); errors are the caller's."""
        self.client.kill_actor(name, reason=reason)

    def stop(self, kill: bool = True, reason: str = "") -> None:
        """Stop background work; with `kill`, also kill every actor of the group."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not kill:
            return
        for slot in self.slots:
            try:
                self.kill(slot.name, reason)
            except FtrlError:
                pass
            except Exception as e:  # a client being torn down
                log.debug("kill_actor(%s) failed: %s", slot.name, e)


def describe_error(error: BaseException) -> str:
    """One line for logs and `last_error`: the remote type and message for user-code errors."""
    if isinstance(error, ActorError):
        return f"ActorError: {error.remote_type}: {error.remote_message}"
    return f"{type(error).__name__}: {error}"
