"""The worker's coordinator-link watchdog and its own pauses (`CoordinatorLink._session`).

Acks come every few heartbeats, so after a pause the silence before it plus the wait
for the next ack can exceed the timeout although the link is fine: a pause of the
worker gives the link a fresh timeout. Once per ack only: repeated stalls must not keep
a dead link open for good. Driven by a fake clock and a fake stream (no sockets)."""

from __future__ import annotations

import asyncio
import math

import pytest

from ftrl.wire import ftrl_pb2 as pb
from tests.unit.worker.link_fakes import make_link

TIMEOUT = 5.0


class FakeAwake:
    """The AwakeClock's interface, set by the test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.resumed_at = -math.inf

    def __call__(self) -> float:
        return self.now

    def pause(self, resumed_at: float, now: float) -> None:
        self.resumed_at, self.now = resumed_at, now


class FakeCall:
    """A Connect stream: writes are kept, acks are fed by the test."""

    def __init__(self) -> None:
        self.written: list[pb.NodeMessage] = []
        self.inbox: asyncio.Queue = asyncio.Queue()

    async def write(self, msg: pb.NodeMessage) -> None:
        self.written.append(msg)

    def __aiter__(self):
        return self

    async def __anext__(self) -> pb.CoordinatorMessage:
        return await self.inbox.get()

    def cancel(self) -> None:
        pass

    def ack_last(self) -> None:
        seq = max(m.heartbeat.seq for m in self.written if m.HasField("heartbeat"))
        self.inbox.put_nowait(pb.CoordinatorMessage(ack=pb.HeartbeatAck(seq=seq)))


class FakeStub:
    """The coordinator's stub: a registration with fast heartbeats (the watchdog looks
    every 10 ms), then `call` as the Connect stream."""

    def __init__(self, call: FakeCall) -> None:
        self.call = call

    async def RegisterNode(self, req, timeout=None, metadata=None) -> pb.RegisterNodeReply:
        return pb.RegisterNodeReply(node_epoch=1, heartbeat_interval_s=0.02, heartbeat_timeout_s=TIMEOUT)

    def Connect(self, metadata=None) -> FakeCall:
        return self.call


async def start_session(call: FakeCall, awake: FakeAwake) -> asyncio.Task:
    """A registered link's session on `call`, as a task."""
    link = make_link(FakeStub(call), awake, on_end=lambda e: None)
    reply = await link._register()
    assert link.hb_timeout == TIMEOUT
    return asyncio.create_task(link._session(reply))


async def _alive_after(session: asyncio.Task, seconds: float = 0.1) -> bool:
    await asyncio.sleep(seconds)  # several watchdog looks
    return not session.done()


async def _link_error(session: asyncio.Task, why: str) -> BaseException | None:
    """The error that ended the session (it must end within 2 s: `why`)."""
    done, _ = await asyncio.wait({session}, timeout=2.0)  # never cancels it
    if session not in done:
        session.cancel()
        pytest.fail(why)
    return session.exception()


def test_a_pause_gives_the_link_a_fresh_timeout_once_per_ack():
    async def main() -> None:
        call, awake = FakeCall(), FakeAwake()
        session = await start_session(call, awake)
        await asyncio.sleep(0.05)
        awake.now = 4.0  # 4 s since the session began, no ack yet (acks every 3rd beat)
        assert await _alive_after(session)
        awake.pause(resumed_at=4.0, now=6.0)  # a pause, then 2 s awake: 6 s since the ack
        assert await _alive_after(session), "the silence before the pause was counted"
        call.ack_last()  # an ack: the next pause gets its fresh timeout too
        await asyncio.sleep(0.05)
        awake.pause(resumed_at=10.0, now=12.0)
        assert await _alive_after(session)
        awake.pause(resumed_at=13.0, now=14.0)  # a second pause with no ack between
        awake.now = 16.0  # 6 s after the first pause's end: the link is dead
        error = await _link_error(session, "a second pause without an ack kept the link open")
        assert isinstance(error, ConnectionError) and "no heartbeat ack for 6.0s" in str(error)

    asyncio.run(main())


def test_without_a_pause_silence_counts_from_the_last_ack():
    async def main() -> None:
        call, awake = FakeCall(), FakeAwake()
        session = await start_session(call, awake)
        await asyncio.sleep(0.05)
        call.ack_last()
        await asyncio.sleep(0.05)
        awake.now = TIMEOUT - 0.5
        assert await _alive_after(session)
        awake.now = TIMEOUT + 0.5
        error = await _link_error(session, "the link outlived its timeout")
        assert isinstance(error, ConnectionError) and "no heartbeat ack" in str(error)

    asyncio.run(main())
