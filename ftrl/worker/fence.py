"""Callee-side fencing: refuse calls from actor incarnations that were replaced.

A calling actor names itself in the call header as `name@incarnation`. The
callee refuses it at once if it has seen a newer incarnation of that name, and
otherwise verifies it with the coordinator. A verification is trusted only for
as long as the coordinator says the caller is sure to stay current (until its
node could be declared lost), so a caller on a partitioned node is refused from
the moment the coordinator fences it. If the coordinator cannot be reached the
call is let through: nothing can be fenced while the coordinator is away, and
the data plane must keep going without it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import FtrlError, NotFoundError, PermissionDeniedError

log = logging.getLogger(__name__)

MAX_TRUST_S = 10.0
UNREACHABLE_GRACE_S = 2.0
MAX_CALLERS = 100_000

Lookup = Callable[[str], Awaitable[pb.ActorInfo]]


def parse_caller(caller: str) -> tuple[str, int] | None:
    """('name', incarnation) for an actor caller, None for a plain client."""
    name, sep, inc = caller.rpartition("@")
    if not sep or not name or not inc.isdigit():
        return None
    return name, int(inc)


class CallerFence:
    """See the module docstring."""

    def __init__(self, lookup: Lookup, clock: Callable[[], float] = time.monotonic) -> None:
        self._lookup = lookup
        self._clock = clock
        self._newest: OrderedDict[str, int] = OrderedDict()
        # name -> (incarnation, trusted until): one entry per caller name
        self._trust: dict[str, tuple[int, float]] = {}
        self._pending: dict[tuple[str, int], asyncio.Future] = {}
        self._warned = False

    def _refuse(self, name: str, inc: int, current: int, why: str = "") -> None:
        raise PermissionDeniedError(
            f"caller {name}@{inc} is fenced: {name} is now incarnation {current}{why}"
        )

    def _note(self, name: str, inc: int) -> int:
        newest = self._newest.pop(name, 0)
        newest = max(newest, inc)
        self._newest[name] = newest
        while len(self._newest) > MAX_CALLERS:
            old, _ = self._newest.popitem(last=False)
            self._trust.pop(old, None)
        return newest

    async def check(self, caller: str) -> None:
        """Return if `caller` may call; raise PermissionDeniedError if it is fenced."""
        parsed = parse_caller(caller)
        if parsed is None:
            return
        name, inc = parsed
        # Only incarnations the coordinator confirmed count as newest: a caller's own
        # claim must not fence the real incarnation (e.g. a forged "name@999").
        newest = self._newest.get(name, 0)
        if inc < newest:
            self._refuse(name, inc, newest)
        key = (name, inc)
        trusted = self._trust.get(name)
        if trusted is not None and trusted[0] == inc and trusted[1] > self._clock():
            return
        pending = self._pending.get(key)
        if pending is None:
            # One verification per caller incarnation at a time, as its own task: a
            # waiter that gives up (its call was cancelled) does not cancel the others.
            pending = asyncio.ensure_future(self._verify(name, inc))
            self._pending[key] = pending
            pending.add_done_callback(lambda f, key=key: self._done(key, f))
        error = await asyncio.shield(pending)
        if error is not None:
            raise error

    def _done(self, key: tuple[str, int], future: asyncio.Future) -> None:
        if self._pending.get(key) is future:
            del self._pending[key]
        if not future.cancelled():
            future.exception()  # retrieved: nobody may be waiting any more

    async def _verify(self, name: str, inc: int) -> PermissionDeniedError | None:
        asked = self._clock()
        try:
            info = await self._lookup(name)
        except NotFoundError:
            return None  # e.g. the coordinator restarted and has not heard of it yet
        except FtrlError as e:
            if not self._warned:
                log.warning("cannot verify callers with the coordinator (%s); letting calls in", e)
                self._warned = True
            # do not ask again on every call while it is away
            self._trust[name] = (inc, self._clock() + UNREACHABLE_GRACE_S)
            return None
        self._warned = False
        if info.incarnation > inc:
            self._note(name, info.incarnation)
            return PermissionDeniedError(
                f"caller {name}@{inc} is fenced: {name} is now incarnation {info.incarnation}")
        if info.incarnation == inc and info.state == pb.ACTOR_DEAD:
            return PermissionDeniedError(f"caller {name}@{inc} is fenced: {name} is DEAD")
        if info.incarnation == inc and info.state == pb.ACTOR_ALIVE:
            self._note(name, inc)
            self._trust[name] = (inc, asked + min(info.valid_for_s, MAX_TRUST_S))
        return None
