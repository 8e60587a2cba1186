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
        self._trusted_until: dict[tuple[str, int], float] = {}
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
            for key in [k for k in self._trusted_until if k[0] == old]:
                del self._trusted_until[key]
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
        if self._trusted_until.get(key, 0.0) > self._clock():
            return
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._pending[key] = pending
            try:
                pending.set_result(await self._verify(name, inc))
            except BaseException as e:
                pending.set_exception(e)
                raise
            finally:
                del self._pending[key]
        error = await asyncio.shield(pending)
        if error is not None:
            raise error

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
            self._trusted_until[(name, inc)] = asked + min(info.valid_for_s, MAX_TRUST_S)
        return None
