"""Draining a node (`NodeAgent.drain()`, on the worker's first SIGTERM).

The coordinator is told (a `Drain` message on the link, again on every new session);
it stops each actor here with `StopActor(drain=True)` and starts it elsewhere; no local
restarts meanwhile. If the coordinator is unreachable, or has not moved them within
half the drain timeout, the worker drains its actors itself. Once none is left (and the
coordinator acknowledged the reports) the agent stops; at `drain_timeout_s` it stops
whatever is left at once.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ftrl.worker.core import AgentCore

log = logging.getLogger("ftrl.worker.agent")

FLUSH_TIMEOUT_S = 10.0  # at the end of a drain: wait this long at most for the reports' ack


class NodeDrain(AgentCore):
    """The node agent's drain (see the module docstring)."""

    def drain(self, reason: str) -> bool:
        """Start draining this node (see the module docstring); False if it drains already."""
        if self.draining:
            return False
        self.draining = reason or "drain requested"
        self._drain_deadline = time.monotonic() + self.opts.drain_timeout_s
        self.pool.size = 0  # no warm spares needed from now on
        self._drain_requested.set()
        self._report_ready.set()  # wakes the writer: the Drain goes out now
        return True

    async def _drain_when_asked(self) -> None:
        """Once drain() is called: wait until no actor is left (bounded), then stop the agent."""
        await self._drain_requested.wait()
        timeout = self.opts.drain_timeout_s
        log.warning("draining (%s): %d actors here; the coordinator moves them away; exiting once "
                    "none is left (at most %gs; a second SIGTERM or SIGINT stops everything now)",
                    self.draining, len(self.actors), timeout)
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                await self._drain_actors(t0 + timeout / 2)
                unsent = await self._flush_reports(FLUSH_TIMEOUT_S)
            log.warning("drained in %.1fs: no actors left%s; exiting", time.monotonic() - t0,
                        f" ({unsent})" if unsent else "")
        except TimeoutError:
            log.error("drain timeout (%gs) passed with %d actors left (%s): stopping them at once",
                      timeout, len(self.actors), ", ".join(sorted(self.actors)))
        self._stop.set()

    async def _drain_actors(self, self_drain_at: float) -> None:
        """Wait until no actor is left. The coordinator stops them (StopActor drain=True);
        if it is unreachable, or after `self_drain_at`, the worker drains them itself."""
        on_our_own = False
        while self.actors:
            if not on_our_own and (not self.connected.is_set() or time.monotonic() >= self_drain_at):
                why = ("the coordinator is unreachable" if not self.connected.is_set() else
                       "the coordinator has not moved them yet")
                log.warning("%s: draining the %d actors here myself (%s)", why, len(self.actors),
                            ", ".join(sorted(self.actors)))
                on_our_own = True
            if on_our_own:
                for la in list(self.actors.values()):
                    if not la.stop_requested:
                        self._begin_stop(la, f"drained: its node drains ({self.draining})", drain=True)
            await asyncio.sleep(0.1)

    async def _flush_reports(self, timeout: float) -> str:
        """Wait (at most `timeout`) until the coordinator has our Drain and every report:
        it acknowledged a heartbeat written after them. Returns what is left unsaid."""
        deadline = time.monotonic() + timeout
        target = None
        while time.monotonic() < deadline:
            if not self.connected.is_set():
                return f"the coordinator is unreachable: {len(self._reports)} reports unsent"
            if self._reports or not self._drain_sent:
                target = None
            elif target is None:
                target = self._hb_sent + 1  # the next heartbeat follows them on the stream
            elif self._hb_acked >= target:
                return ""
            await asyncio.sleep(0.05)
        return (f"{len(self._reports)} reports not acknowledged by the coordinator within "
                f"{timeout:g}s; it will find out when this node is declared lost")
