"""The client's connections: the coordinator channel, one channel per actor address,
the credentials they carry, and the unary coordinator call with its error mapping.

Every other client module builds on `Connection`; it imports none of them.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Self

import grpc
from grpc import aio

from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import error_from_rpc
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.limits import CHUNK_BYTES, MAX_ACTOR_MESSAGE, MAX_CALL_BYTES
from ftrl.wire.security import CALLER_HEADER, Security, discover_token, secure_channel

DEFAULT_ADDRESS = "127.0.0.1:6380"
CONTROL_TIMEOUT_S = 10.0
_CONTROL_RECV = 64 << 20
#: How long calls in flight on a dropped actor channel may take to end on their own
#: before it is closed under them (then they fail as ActorUnavailableError).
DROPPED_CHANNEL_GRACE_S = 120.0


def default_address() -> str:
    """The coordinator address: $FTRL_COORDINATOR, else the local default."""
    return os.environ.get("FTRL_COORDINATOR") or DEFAULT_ADDRESS


def client_security(token: str | None, security: Security | None) -> Security:
    """`security` (default: from the environment), with `token` over its own if given."""
    base = security if security is not None else Security.from_env()
    return base.with_token(token) if token else base


def _with_recv_limit(options: list[tuple[str, Any]], limit: int) -> list[tuple[str, Any]]:
    """`options` with the receive-size limit replaced by `limit`."""
    kept = [o for o in options if o[0] != "grpc.max_receive_message_length"]
    return [*kept, ("grpc.max_receive_message_length", limit)]


class Connection:
    """Channels to the coordinator and to actors, opened lazily. Use inside one event loop."""

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        *,
        security: Security | None = None,
        caller: str = "",
        timeout: float = CONTROL_TIMEOUT_S,
    ) -> None:
        self.address = address or default_address()
        self.security = client_security(token, security)
        if self.security.token is None and not self.security.insecure:
            found = discover_token(self.address)  # a coordinator on loopback left one
            if found:
                self.security = self.security.with_token(found)
        self.caller = caller
        self.timeout = timeout
        self._md: tuple[tuple[str, str], ...] = (
            self.security.metadata() + (((CALLER_HEADER, caller),) if caller else ()))
        self._channel: aio.Channel | None = None
        self._stub: pb_grpc.CoordinatorStub | None = None
        self._actor_channels: dict[str, tuple[aio.Channel, pb_grpc.ActorStub]] = {}
        self._dropped: dict[asyncio.Task, aio.Channel] = {}  # dropped channels still closing
        # (actor, method) pairs whose replies were large: those calls stream.
        self.large_replies: set[tuple[str, str]] = set()

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata: credentials and, if set, the caller's name."""
        return self._md

    @property
    def stub(self) -> pb_grpc.CoordinatorStub:
        """The coordinator stub (its channel opens on first use)."""
        if self._stub is None:
            opts = _with_recv_limit(channel_options(4 << 20), _CONTROL_RECV)
            self._channel = secure_channel(self.address, self.security, opts)
            self._stub = pb_grpc.CoordinatorStub(self._channel)
        return self._stub

    def actor_stub(self, address: str) -> pb_grpc.ActorStub:
        """The stub of the actor server at `address` (one cached channel per address)."""
        entry = self._actor_channels.get(address)
        if entry is None:
            # Requests stream in 1 MiB chunks; a unary reply may carry a whole result.
            opts = _with_recv_limit(channel_options(MAX_ACTOR_MESSAGE), MAX_CALL_BYTES + CHUNK_BYTES)
            channel = secure_channel(address, self.security, opts)
            entry = (channel, pb_grpc.ActorStub(channel))
            self._actor_channels[address] = entry
        return entry[1]

    async def drop_actor_channel(self, address: str) -> None:
        """Forget the channel to `address` after a call on it failed: the next call opens a
        fresh one. Calls still in flight on it end on their own (a dead actor's fail by
        themselves, a live one's answer); the channel closes once they are done, or after
        DROPPED_CHANNEL_GRACE_S."""
        entry = self._actor_channels.pop(address, None)
        if entry is not None:
            task = asyncio.get_running_loop().create_task(entry[0].close(grace=DROPPED_CHANNEL_GRACE_S))
            self._dropped[task] = entry[0]
            task.add_done_callback(lambda t: self._dropped.pop(t, None))

    async def _rpc(self, name: str, request: Any, timeout: float | None = None) -> Any:
        """Coordinator method `name`(request); gRPC errors become ftrl errors."""
        try:
            return await getattr(self.stub, name)(
                request, timeout=timeout or self.timeout, metadata=self._md)
        except grpc.RpcError as e:
            raise error_from_rpc(e, f"coordinator at {self.address}") from None

    async def close(self) -> None:
        """Close every channel (dropped ones still closing too, at once)."""
        for channel, _ in list(self._actor_channels.values()):
            await channel.close()
        self._actor_channels.clear()
        for task, channel in list(self._dropped.items()):
            task.cancel()
            await channel.close()
        self._dropped.clear()
        if self._channel is not None:
            await self._channel.close()
            self._channel, self._stub = None, None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
