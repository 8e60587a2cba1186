"""The worker's coordinator link loop: it reconnects after a broken stream, and it ends
when the worker stops (`NodeAgent._stop_tasks`, what `run()` does), even when the
stream breaks at the same moment (Python's TaskGroup then raises the stream's error
instead of the cancellation; an orphaned embedded worker once reconnected forever
after SIGINT that way)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ftrl.worker.agent import NodeAgent


class FakeAgent:
    """What `NodeAgent._connection_loop` uses; each session is a TaskGroup whose stream
    reader fails once `broken` is set, like the real session."""

    def __init__(self) -> None:
        self.opts = SimpleNamespace(connect_timeout_s=120.0, coordinator="127.0.0.1:1")
        self.connected = asyncio.Event()
        self._stop = asyncio.Event()
        self._fatal = None
        self._stopping = False
        self.actors: dict = {}
        self.broken = asyncio.Event()
        self.sessions = 0
        self.session_started = asyncio.Condition()

    async def _register(self) -> object:
        return object()

    async def _session(self, reply: object) -> None:
        async with self.session_started:
            self.sessions += 1
            self.session_started.notify_all()

        async def reader() -> None:
            await self.broken.wait()
            raise ConnectionError("coordinator closed the stream")

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(reader())
                tg.create_task(asyncio.sleep(3600))  # the heartbeat writer
        except BaseExceptionGroup as eg:
            raise ConnectionError(str(eg.exceptions[0])) from None


async def _sessions(agent: FakeAgent, n: int) -> None:
    """Wait (at most 10 s) until the loop has started its n-th session."""
    async with agent.session_started:
        await asyncio.wait_for(agent.session_started.wait_for(lambda: agent.sessions >= n), 10.0)


async def _ends_within(task: asyncio.Task, seconds: float) -> bool:
    done, _ = await asyncio.wait({task}, timeout=seconds)  # never cancels it again
    return task in done


def test_a_stop_while_the_stream_breaks_ends_the_loop():
    async def scenario() -> None:
        agent = FakeAgent()
        task = asyncio.create_task(NodeAgent._connection_loop(agent))
        await _sessions(agent, 1)
        agent.broken.set()  # the coordinator dies ...
        await asyncio.sleep(0)  # ... its stream's reader fails ...
        NodeAgent._stop_tasks(agent, [task])  # ... as the worker is told to stop
        try:
            assert await _ends_within(task, 5.0), "the link loop went on reconnecting after the stop"
            assert task.cancelled()
        finally:
            task.cancel()
        assert agent.sessions == 1

    asyncio.run(scenario())


def test_a_broken_stream_alone_reconnects_and_a_plain_stop_ends_the_loop():
    async def scenario() -> None:
        agent = FakeAgent()
        agent.broken.set()  # every session breaks at once: the loop keeps reconnecting
        task = asyncio.create_task(NodeAgent._connection_loop(agent))
        await _sessions(agent, 2)
        assert not task.done()
        agent.broken.clear()  # a session started from now on stays up until the stop
        await _sessions(agent, agent.sessions + 1)
        NodeAgent._stop_tasks(agent, [task])
        try:
            assert await _ends_within(task, 5.0)
            assert task.cancelled()
        finally:
            task.cancel()

    asyncio.run(scenario())
