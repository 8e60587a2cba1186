"""`ftrl worker`: run a node agent until a signal.

The first SIGTERM (a pre-emption notice, `systemctl stop`) drains the node: its
actors move away gracefully, then the worker exits (at most `drain_timeout_s`).
SIGINT, or a second SIGTERM, stops the worker and its actors at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from ftrl.wire.security import Security, check_bind
from ftrl.worker.agent import NodeAgent, WorkerOptions

log = logging.getLogger(__name__)


def handle_signals(agent: NodeAgent, stop: asyncio.Event) -> None:
    """SIGTERM: drain first, stop on the second; SIGINT: stop now."""
    loop = asyncio.get_running_loop()

    def on_sigterm() -> None:
        if agent.drain("the worker got SIGTERM"):
            return
        log.warning("SIGTERM again while draining: stopping all actors now")
        stop.set()

    def on_sigint() -> None:
        log.warning("SIGINT: stopping all actors now")
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    loop.add_signal_handler(signal.SIGINT, on_sigint)


async def serve(opts: WorkerOptions, security: Security, stop: asyncio.Event | None = None) -> None:
    agent = NodeAgent(opts, security)
    check_bind(agent.node.address, agent.security, "this worker's actors")
    if stop is None:
        stop = asyncio.Event()
        handle_signals(agent, stop)
    await agent.run(stop)
