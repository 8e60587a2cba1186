"""A call to an address whose channel another failed call dropped is not cut: the channel
closes only once its calls are done (or after a grace). A call whose channel is closed
under it fails with ActorUnavailableError, like any lost connection, never a bare
CancelledError, which callers gathering futures do not expect. A caller that cancels its
own call still gets CancelledError."""

from __future__ import annotations

import asyncio
import threading
from typing import NamedTuple

import pytest

from ftrl.client.aio import AsyncActorHandle, AsyncClient
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import ActorUnavailableError
from ftrl.wire.security import Security, bind
from ftrl.worker.actor_server import ActorServicer, new_actor_server
from tests.actors import Counter


class SignallingCounter(Counter):
    """A Counter that tells when its `sleep` runs: the call is in flight on the server."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping = threading.Event()

    def sleep(self, seconds: float) -> float:
        self.sleeping.set()
        return super().sleep(seconds)


class Served(NamedTuple):
    address: str
    actor: SignallingCounter

    async def wait_sleeping(self) -> None:
        assert await asyncio.to_thread(self.actor.sleeping.wait, 10.0), "the call never reached the actor"


@pytest.fixture
async def served():
    """An actor server (a Counter, incarnation 3) on loopback, without a token."""
    actor = SignallingCounter()
    servicer = ActorServicer(actor, "c", 3)
    server = new_actor_server(servicer, Security(), 1 << 20)
    port = bind(server, "127.0.0.1:0", Security())
    await server.start()
    try:
        yield Served(f"127.0.0.1:{port}", actor)
    finally:
        await server.stop(0)
        servicer.executor.shutdown(wait=False)


def _handle(client: AsyncClient, address: str) -> AsyncActorHandle:
    info = pb.ActorInfo(name="c", state=pb.ACTOR_ALIVE, incarnation=3, address=address, valid_for_s=60.0)
    return AsyncActorHandle(client, "c", info, strict=True, timeout=10.0)


async def test_a_call_in_flight_on_a_dropped_channel_ends_on_its_own_result(served):
    """Another call to the same address failed and dropped the channel: the calls still in
    flight on it are not cut (a live actor answers them), and the next call opens a new one."""
    client = AsyncClient("127.0.0.1:1", security=Security())
    try:
        handle = _handle(client, served.address)
        assert await handle.call("incr", 2) == 2  # the channel is up
        slow = asyncio.ensure_future(handle.call("sleep", 0.5))
        await served.wait_sleeping()  # the call is in flight
        await client.drop_actor_channel(served.address)
        assert await handle.call("incr", 1) == 3  # on a fresh channel, at once
        assert await asyncio.wait_for(slow, 10.0) == 0.5
    finally:
        await client.close()


async def test_a_call_cut_by_a_closed_channel_is_unavailable_not_cancelled(served):
    """A channel closed under a call (the client closing, or a dropped channel's grace
    over): ActorUnavailableError, never a bare CancelledError."""
    client = AsyncClient("127.0.0.1:1", security=Security())
    try:
        handle = _handle(client, served.address)
        assert await handle.call("incr", 2) == 2
        slow = asyncio.ensure_future(handle.call("sleep", 5.0))
        await served.wait_sleeping()
        channel, _ = client._actor_channels[served.address]
        await channel.close()
        with pytest.raises(ActorUnavailableError, match=r"channel to .* closed"):
            await asyncio.wait_for(slow, 5.0)
        assert not slow.cancelled()
    finally:
        await client.close()


async def test_a_call_its_caller_cancels_is_cancelled(served):
    client = AsyncClient("127.0.0.1:1", security=Security())
    try:
        slow = asyncio.ensure_future(_handle(client, served.address).call("sleep", 5.0))
        await served.wait_sleeping()
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert slow.cancelled()
    finally:
        await client.close()
