"""Draining a node (`NodeDrain.drain()`, on the worker's first SIGTERM).

The coordinator is told (a `Drain` message on the link, again on every new session);
it stops each actor here with `StopActor(drain=True)` and starts it elsewhere; no local
restarts meanwhile. If the coordinator is unreachable, or has not moved them within
half the drain timeout, the worker drains its actors itself. Once none is left (and the
coordinator acknowledged the reports) the agent stops; at `drain_timeout_s` it stops
whatever is left at once.

`NodeDrain` owns whether and why the node drains, and runs the drain (`run()`) through
what it needs of the actors (`DrainingActors`) and of the link (`DrainLink`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from ftrl.worker.outbox import Outbox

log = logging.getLogger("ftrl.worker.agent")

FLUSH_TIMEOUT_S = 10.0  # at the end of a drain: wait this long at most for the reports' ack


class DrainingActors(Protocol):
    """What the drain needs of the node's actors (`lifecycle.ActorLifecycle`)."""

    def names(self) -> list[str]:
        """The names of the actors on this node, sorted."""
        ...

    def begin_drain(self, reason: str, deadline: float) -> None:
        """No restarts in place from now on; the drain ends at `deadline` (monotonic)."""
        ...

    def drain_remaining(self) -> None:
        """Stop every actor not stopping yet, letting it run its drain hook first."""
        ...


class DrainLink(Protocol):
    """What the drain needs of the coordinator link (`link.CoordinatorLink`)."""

    connected: asyncio.Event  # set while the coordinator acknowledges heartbeats

    async def flush(self, timeout: float) -> str:
        """Wait until the coordinator has our Drain and every report; what is left unsaid."""
        ...


class NodeDrain:
    """The node's drain (see the module docstring); `stop()` stops the agent at its end."""

    def __init__(self, timeout_s: float, actors: DrainingActors, link: DrainLink, outbox: Outbox,
                 stop: Callable[[], None]) -> None:
        self.timeout_s = timeout_s
        self.actors = actors
        self.link = link
        self.outbox = outbox
        self._stop = stop
        self.reason = ""  # why the node drains; "" while it does not
        self._requested = asyncio.Event()

    def drain(self, reason: str) -> bool:
        """Start draining this node (see the module docstring); False if it drains already."""
        if self.reason:
            return False
        self.reason = reason or "drain requested"
        self.actors.begin_drain(self.reason, time.monotonic() + self.timeout_s)
        self.outbox.announce_drain(self.reason)  # wakes the link's writer: the Drain goes out now
        self._requested.set()
        return True

    async def run(self) -> None:
        """Once drain() is called: wait until no actor is left (bounded), then stop the agent."""
        await self._requested.wait()
        timeout = self.timeout_s
        log.warning("draining (%s): %d actors here; the coordinator moves them away; exiting once "
                    "none is left (at most %gs; a second SIGTERM or SIGINT stops everything now)",
                    self.reason, len(self.actors.names()), timeout)
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                await self._drain_actors(t0 + timeout / 2)
                unsent = await self.link.flush(FLUSH_TIMEOUT_S)
            log.warning("drained in %.1fs: no actors left%s; exiting", time.monotonic() - t0,
                        f" ({unsent})" if unsent else "")
        except TimeoutError:
            names = self.actors.names()
            log.error("drain timeout (%gs) passed with %d actors left (%s): stopping them at once",
                      timeout, len(names), ", ".join(names))
        self._stop()

    async def _drain_actors(self, self_drain_at: float) -> None:
        """Wait until no actor is left. The coordinator stops them (StopActor drain=True);
        if it is unreachable, or after `self_drain_at`, the worker drains them itself."""
        on_our_own = False
        while names := self.actors.names():
            connected = self.link.connected.is_set()
            if not on_our_own and (not connected or time.monotonic() >= self_drain_at):
                why = ("the coordinator is unreachable" if not connected else
                       "the coordinator has not moved them yet")
                log.warning("%s: draining the %d actors here myself (%s)", why, len(names),
                            ", ".join(names))
                on_our_own = True
            if on_our_own:
                self.actors.drain_remaining()
            await asyncio.sleep(0.1)
