"""The worker's coordinator link loop: it reconnects after a broken stream, and it ends
when the worker stops (`CoordinatorLink.stop_reconnecting` then a cancel, what
`NodeAgent.run()` does), even when the stream breaks at the same moment (Python's
TaskGroup then raises the stream's error instead of the cancellation; an orphaned
embedded worker once reconnected forever after SIGINT that way)."""

from __future__ import annotations

import asyncio

from ftrl.wire import ftrl_pb2 as pb
from tests.unit.worker.link_fakes import make_link


class StoppedClock:
    """An awake clock that does not move: the link's watchdog never times out."""

    resumed_at = float("-inf")

    def __call__(self) -> float:
        return 0.0


class Stream:
    """A Connect stream whose reads fail once `broken` is set (or if it was set when the
    stream opened), like a real one."""

    def __init__(self, broken: asyncio.Event) -> None:
        self.broken = broken
        self.born_broken = broken.is_set()

    async def write(self, msg: pb.NodeMessage) -> None:
        pass

    def __aiter__(self):
        return self

    async def __anext__(self) -> pb.CoordinatorMessage:
        if not self.born_broken:
            await self.broken.wait()
        raise ConnectionError("coordinator closed the stream")

    def cancel(self) -> None:
        pass


class Coordinator:
    """The coordinator's stub: every registration succeeds; each session is counted."""

    def __init__(self) -> None:
        self.broken = asyncio.Event()
        self.sessions = 0

    async def RegisterNode(self, req, timeout=None, metadata=None) -> pb.RegisterNodeReply:
        return pb.RegisterNodeReply(node_epoch=1)

    def Connect(self, metadata=None) -> Stream:
        self.sessions += 1
        return Stream(self.broken)


async def _sessions(coordinator: Coordinator, n: int) -> None:
    """Wait (at most 10 s) until the loop has started its n-th session."""
    async with asyncio.timeout(10.0):
        while coordinator.sessions < n:  # noqa: ASYNC110 (polls the fake's count)
            await asyncio.sleep(0.005)


async def _ends_within(task: asyncio.Task, seconds: float) -> bool:
    done, _ = await asyncio.wait({task}, timeout=seconds)  # never cancels it again
    return task in done


def test_a_stop_while_the_stream_breaks_ends_the_loop():
    async def scenario() -> None:
        coordinator, ended = Coordinator(), []
        link = make_link(coordinator, StoppedClock(), on_end=ended.append)
        task = asyncio.create_task(link.run())
        await _sessions(coordinator, 1)
        coordinator.broken.set()  # the coordinator dies ...
        await asyncio.sleep(0)  # ... its stream's reader fails ...
        link.stop_reconnecting()  # ... as the worker is told to stop
        task.cancel()
        try:
            assert await _ends_within(task, 5.0), "the link loop went on reconnecting after the stop"
            assert task.cancelled()
        finally:
            task.cancel()
        assert coordinator.sessions == 1
        assert ended == []  # a stop, not the end of the agent by the link

    asyncio.run(scenario())


def test_a_broken_stream_alone_reconnects_and_a_plain_stop_ends_the_loop():
    async def scenario() -> None:
        coordinator, ended = Coordinator(), []
        link = make_link(coordinator, StoppedClock(), on_end=ended.append)
        coordinator.broken.set()  # every session breaks at once: the loop keeps reconnecting
        task = asyncio.create_task(link.run())
        await _sessions(coordinator, 2)
        assert not task.done()
        coordinator.broken.clear()  # a session started from now on stays up until the stop
        await _sessions(coordinator, coordinator.sessions + 1)
        link.stop_reconnecting()
        task.cancel()
        try:
            assert await _ends_within(task, 5.0)
            assert task.cancelled()
        finally:
            task.cancel()
        assert ended == []

    asyncio.run(scenario())
