"""The worker's link to the coordinator under churn: a real coordinator server and a real
node agent in this process (loopback gRPC), the coordinator closing the node's stream
again and again while heartbeats fly. The agent must reconnect every time; it must
never give up (which would take its actors down with it)."""

from __future__ import annotations

import asyncio

from ftrl.coordinator.controller import Controller, ControllerConfig
from ftrl.coordinator.server import CoordinatorServer
from ftrl.wire.security import Security
from ftrl.worker.agent import NodeAgent, WorkerOptions


async def _until(predicate, timeout: float, what: str) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 (polls another component's state)
            await asyncio.sleep(0.005)


async def test_agent_survives_its_stream_being_closed_mid_write(tmp_path):
    controller = Controller(ControllerConfig(heartbeat_interval_s=0.002, heartbeat_timeout_s=2.0))
    server = CoordinatorServer(controller, Security(), port=0)
    port = await server.start()
    agent = NodeAgent(WorkerOptions(coordinator=f"127.0.0.1:{port}", node_id="churn", slots=1,
                                    spares=0, log_dir=str(tmp_path)), Security())
    stop = asyncio.Event()
    run = asyncio.create_task(agent.run(stop))
    try:
        for _ in range(30):
            await _until(lambda: "churn" in server.servicer.streams, 10, "the stream")
            server.servicer._close_stream("churn")  # what a re-register or a fence does
            await asyncio.sleep(0.01)
            assert not run.done(), run.exception() if run.done() else None
        await _until(lambda: agent.link.connected.is_set() and "churn" in server.servicer.streams, 10,
                     "a final reconnect")
        assert controller.nodes["churn"].connected
    finally:
        stop.set()
        await asyncio.wait_for(run, 15)
        await server.stop(0)
