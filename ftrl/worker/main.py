"""`ftrl worker`: run a node agent until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio

from ftrl.util.runtime import stop_on_signals
from ftrl.wire.security import Security, check_bind
from ftrl.worker.agent import NodeAgent, WorkerOptions


async def serve(opts: WorkerOptions, security: Security, stop: asyncio.Event | None = None) -> None:
    agent = NodeAgent(opts, security)
    check_bind(agent.address, agent.security, "this worker's actors")
    if stop is None:
        stop = asyncio.Event()
        stop_on_signals(stop)
    await agent.run(stop)
