"""Event streams: the coordinator's actor and node events as they happen."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc

from ftrl.client.connection import Connection
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.convert import event_dict
from ftrl.wire.errors import FtrlTimeoutError, error_from_rpc


class EventCalls(Connection):
    """The event stream of the coordinator (part of `AsyncClient`)."""

    async def events(self, prefix: str = "", nodes: bool = False, after_seq: int = -1) -> AsyncIterator[dict]:
        """Stream actor events (and node events if `nodes`) as dicts, as they happen;
        with `after_seq` >= 0, first the retained ones with a larger seq."""
        call = self.stub.WatchEvents(
            pb.WatchEventsRequest(prefix=prefix, nodes=nodes, after_seq=max(0, after_seq),
                                  replay=after_seq >= 0), metadata=self._md)
        try:
            async for event in call:
                yield event_dict(event)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise error_from_rpc(e, f"coordinator at {self.address}") from None
        finally:
            call.cancel()


async def first_event(events: AsyncIterator[dict], predicate: Callable[[dict], bool],
                      timeout: float) -> dict:
    """The first event matching `predicate` within `timeout` seconds."""
    async with asyncio.timeout(timeout):
        async for event in events:
            if predicate(event):
                return event
    raise FtrlTimeoutError("event stream ended")

