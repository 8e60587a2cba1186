"""Async actor handles: calls to one named actor that follow (or, strict, refuse) its
restarts, and are fenced against a partitioned old copy.

A handle needs only a `Connection`: it looks the actor up at the coordinator itself
(`wait_actor`) and sends calls over the connection's channel to the actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import grpc

from ftrl.client.connection import Connection
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.chunks import assemble
from ftrl.wire.convert import actor_dict
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorStartError,
    ActorUnavailableError,
    FtrlTimeoutError,
    InvalidArgumentError,
    StaleIncarnationError,
    error_from_rpc,
)
from ftrl.wire.limits import CHUNK_BYTES, check_method

#: Longest a handle trusts a known incarnation without asking the coordinator.
MAX_TRUST_S = 10.0
REVALIDATE_TIMEOUT_S = 2.0


async def wait_actor(conn: Connection, name: str, timeout: float = 60.0,
                     min_incarnation: int = 0) -> pb.ActorInfo:
    """Wait until `name` is ALIVE (incarnation >= min_incarnation) or DEAD; returns its info."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        wait = max(0.0, min(remaining, 60.0))
        info = await conn._rpc(
            "GetActor",
            pb.GetActorRequest(name=name, wait_s=wait, min_incarnation=min_incarnation),
            timeout=wait + conn.timeout,
        )
        if info.state == pb.ACTOR_DEAD:
            return info
        if info.state == pb.ACTOR_ALIVE and info.incarnation >= min_incarnation:
            return info
        if time.monotonic() >= deadline:
            state = actor_dict(info)["state"]
            raise FtrlTimeoutError(
                f"actor {name} is still {state} after {timeout:g}s"
                + (f" (needs {dict(info.resources)}; is any node free?)" if state == "PENDING" else "")
            )


def _encode_call(method: str, args: tuple, kwargs: dict) -> tuple[list, int]:
    """The call's arguments as msgpack parts and their total size."""
    try:
        return codec.encode_parts([list(args), kwargs])
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"arguments of {method}() are not msgpack-able: {e}") from None


def _request_chunks(header: pb.CallHeader, parts: list) -> Iterator[pb.CallChunk]:
    """The request stream of a large call: the header rides on the first chunk."""
    first = True
    for data in codec.iter_chunks(parts, CHUNK_BYTES):
        yield pb.CallChunk(header=header, data=data) if first else pb.CallChunk(data=data)
        first = False


class AsyncActorHandle:
    """A reference to a named actor. Calls carry the incarnation the handle knows.

    Default handles follow restarts: after the actor dies, the call in flight
    raises ActorUnavailableError and the next call waits until a new
    incarnation is ALIVE. `strict=True` handles never switch incarnation on
    their own: a restarted actor raises StaleIncarnationError until the owner
    has resynced it and called `wait_alive()` (what an owner with state to
    restore wants).

    Either way a handle trusts the incarnation it knows only as long as the
    coordinator said it is sure to stay current (`valid_for_s`, until its node
    could be declared lost); after that the next call checks with the
    coordinator first, so a partitioned old copy is not called once fenced. If
    the coordinator cannot be reached the call goes ahead.
    """

    def __init__(self, client: Connection, name: str, info: pb.ActorInfo | None = None,
                 strict: bool = False, timeout: float | None = None, resolve_timeout: float = 60.0) -> None:
        self.client = client
        self.name = name
        self.strict = strict
        self.timeout = timeout
        self.resolve_timeout = resolve_timeout
        self._info = info
        self._usable = info is not None and info.state == pb.ACTOR_ALIVE
        self._failed: tuple[int, str] | None = None
        self._trusted_until = time.monotonic() + min(info.valid_for_s, MAX_TRUST_S) if info else 0.0
        self.incarnation = info.incarnation if info is not None else 0

    def options(self, *, timeout: float | None = None, strict: bool | None = None,
                resolve_timeout: float | None = None) -> AsyncActorHandle:
        """A copy with a per-call timeout and/or strictness."""
        copy = AsyncActorHandle(self.client, self.name, self._info,
                                self.strict if strict is None else strict,
                                timeout if timeout is not None else self.timeout,
                                resolve_timeout if resolve_timeout is not None else self.resolve_timeout)
        copy.incarnation, copy._usable = self.incarnation, self._usable
        copy._trusted_until = self._trusted_until
        return copy

    @property
    def address(self) -> str:
        """The address of the incarnation this handle calls."""
        return self._info.address if self._info is not None else ""

    @property
    def restarts(self) -> int:
        """The runtime's restart count of this actor when this handle last resolved it."""
        return int(self._info.restarts) if self._info is not None else 0

    def __repr__(self) -> str:
        return f"<ActorHandle {self.name} incarnation {self.incarnation}>"

    async def info(self) -> dict[str, Any]:
        """The actor's record now (see `AsyncClient.actor`)."""
        return actor_dict(await self.client._rpc("GetActor", pb.GetActorRequest(name=self.name)))

    async def wait_alive(self, timeout: float = 60.0) -> int:
        """Wait until the actor is ALIVE, adopt that incarnation and return it. After
        this handle saw a call fail, the incarnation it failed on only counts if it
        still answers (the coordinator may not have heard of the death yet)."""
        await self._resolve(timeout, adopt_any=True)
        return self.incarnation

    def _adopt(self, info: pb.ActorInfo, asked: float) -> None:
        self._info, self.incarnation, self._usable, self._failed = info, info.incarnation, True, None
        self._trusted_until = asked + min(info.valid_for_s, MAX_TRUST_S)

    async def _ask_coordinator(self) -> tuple[pb.ActorInfo | None, float]:
        """The actor's record now (and when we asked), or None if the coordinator is
        away: then nothing can be fenced meanwhile, so callers go ahead, and the next
        few calls do not ask again."""
        asked = time.monotonic()
        try:
            info = await self.client._rpc("GetActor", pb.GetActorRequest(name=self.name),
                                          timeout=REVALIDATE_TIMEOUT_S)
        except (ActorUnavailableError, FtrlTimeoutError):
            self._trusted_until = time.monotonic() + REVALIDATE_TIMEOUT_S
            return None, asked
        return info, asked

    async def _revalidate(self) -> None:
        """The trust in the known incarnation ran out: ask the coordinator again."""
        info, asked = await self._ask_coordinator()
        if info is None:
            return
        if info.state == pb.ACTOR_DEAD:
            self._usable = False
            raise _dead_error(info)
        if info.incarnation == self.incarnation and info.address == self.address:
            self._adopt(info, asked)
            return
        self._usable = False
        if self.strict and info.incarnation != self.incarnation:
            raise StaleIncarnationError(
                f"actor {self.name} was replaced (incarnation {self.incarnation} -> "
                f"{info.incarnation}); resync it, then call wait_alive()")

    async def _resolve(self, timeout: float | None = None, adopt_any: bool = False) -> None:
        """Find the incarnation to call. After a failed call, the coordinator may not
        have heard of the death yet: while it still names the address that just
        failed, probe that address, and between probes wait (briefly) for a newer
        incarnation. A slow but live actor is found again by a later probe."""
        timeout = self.resolve_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        failed = self._failed
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            asked = time.monotonic()
            info = await wait_actor(self.client, self.name, remaining)
            if info.state == pb.ACTOR_DEAD:
                raise _dead_error(info)
            if not failed or (info.incarnation, info.address) != failed:
                break
            if await self._answers(info.address, info.incarnation, timeout=min(2.0, remaining)):
                break
            if time.monotonic() >= deadline:
                raise FtrlTimeoutError(
                    f"actor {self.name} incarnation {info.incarnation} at {info.address} does not "
                    f"answer and was not replaced within {timeout:g}s")
            with contextlib.suppress(FtrlTimeoutError):
                wait = min(2.0, max(0.0, deadline - time.monotonic()))
                await wait_actor(self.client, self.name, wait, info.incarnation + 1)
        if not adopt_any and self.strict and self.incarnation and info.incarnation != self.incarnation:
            raise StaleIncarnationError(
                f"actor {self.name} restarted (incarnation {self.incarnation} -> "
                f"{info.incarnation}); resync it, then call wait_alive()"
            )
        self._adopt(info, asked)

    async def _answers(self, address: str, incarnation: int, timeout: float = 1.0) -> bool:
        """True if `incarnation` at `address` answers a ping within `timeout`."""
        try:
            reply = await self.client.actor_stub(address).Ping(
                pb.PingRequest(incarnation=incarnation), timeout=timeout, metadata=self.client.metadata)
            return reply.incarnation == incarnation
        except grpc.RpcError:
            await self.client.drop_actor_channel(address)
            return False

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call `method(*args, **kwargs)` on the actor and return its result.

        Raises ActorError if the method raised, ActorUnavailableError if the actor
        died or could not be reached during the call, ActorDiedError if it is DEAD.
        """
        check_method(method)
        payload = _encode_call(method, args, kwargs)
        if self._usable and time.monotonic() >= self._trusted_until:
            await self._revalidate()
        if not self._usable:
            await self._resolve()
        try:
            return await self._call_checked(method, payload)
        except StaleIncarnationError as e:
            if e.discarded:  # it ran on a copy fenced meanwhile: the caller decides
                raise
            # Refused before running: safe to retry once on the current incarnation.
            self._usable = False
            if self.strict:
                raise
            await self._resolve()
            return await self._call_checked(method, payload)
        except ActorUnavailableError as e:
            self._usable = False
            self._failed = (self.incarnation, self.address)
            await self.client.drop_actor_channel(self.address)
            if self.strict or not _never_sent(e):
                raise
        # The connection was refused: the call never reached the actor, so it is
        # safe to send it to whatever incarnation serves now.
        await self._resolve()
        return await self._call_checked(method, payload)

    async def _call_checked(self, method: str, payload: tuple[list, int]) -> Any:
        """One call; if it outlived the trust in its callee, the callee must still be
        current before its result is accepted (a fenced copy's result is discarded)."""
        incarnation = self.incarnation
        result = await self._call_once(method, payload)
        if time.monotonic() < self._trusted_until:
            return result
        info, asked = await self._ask_coordinator()
        if info is None:
            return result
        if info.incarnation == incarnation and info.state != pb.ACTOR_DEAD:
            if info.state == pb.ACTOR_ALIVE and info.address == self.address:
                self._adopt(info, asked)
            return result
        self._usable = False
        error = StaleIncarnationError(
            f"discarded the result of {self.name}.{method}(): incarnation {incarnation} was "
            f"fenced while the call ran (now incarnation {info.incarnation}, "
            f"{'DEAD' if info.state == pb.ACTOR_DEAD else 'replaced'})")
        error.discarded = True
        raise error

    async def _call_once(self, method: str, payload: tuple[list, int]) -> Any:
        """One call to the known incarnation, unary when small, else streamed."""
        address = self.address
        parts, total = payload
        header = pb.CallHeader(method=method, incarnation=self.incarnation, total_bytes=total,
                               caller=self.client.caller)
        stub = self.client.actor_stub(address)
        unary = total <= CHUNK_BYTES and (self.name, method) not in self.client.large_replies
        try:
            if unary:
                (data,) = list(codec.iter_chunks(parts, CHUNK_BYTES))
                first = await stub.CallUnary(pb.CallChunk(header=header, data=data),
                                             timeout=self.timeout, metadata=self.client.metadata)
                if first.HasField("error"):
                    e = first.error
                    raise ActorError(e.type, e.message, e.traceback)
                if len(first.data) > CHUNK_BYTES:
                    self.client.large_replies.add((self.name, method))
                if len(first.data) != first.total_bytes:
                    raise InvalidArgumentError(f"{len(first.data)} of {first.total_bytes} bytes")
                data = first.data
            else:
                data = await self._call_stream(stub, header, parts)
        except StopAsyncIteration:
            raise ActorUnavailableError(f"actor {self.name} closed the call without a reply") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our caller cancelled us
            # gRPC cancels the calls of a channel closed under them (the client closing, or
            # a channel dropped after a failed call whose grace ran out): the actor is
            # unreachable to this call, not our caller gone.
            raise ActorUnavailableError(f"call {self.name}.{method}() was cut: the channel to "
                                        f"{address} closed under it") from None
        except InvalidArgumentError as e:
            raise ActorUnavailableError(f"reply from {self.name}.{method}() was cut: {e}") from None
        except grpc.RpcError as e:
            err = error_from_rpc(e, f"actor {self.name} (incarnation {self.incarnation}) at {address}")
            if isinstance(err, FtrlTimeoutError):
                err = FtrlTimeoutError(f"call {self.name}.{method}() timed out after {self.timeout:g}s")
            raise err from None
        return codec.decode_parts(data)

    async def _call_stream(self, stub: pb_grpc.ActorStub, header: pb.CallHeader, parts: list) -> bytearray:
        """One streamed call: chunked request, chunked reply."""
        call = stub.Call(_request_chunks(header, parts), timeout=self.timeout, metadata=self.client.metadata)
        replies = call.__aiter__()
        first = await replies.__anext__()
        if first.HasField("error"):
            e = first.error
            raise ActorError(e.type, e.message, e.traceback)
        return await assemble(first.data, (c.data async for c in replies), first.total_bytes)

    async def state(self) -> Any:
        """The actor's `__ftrl_state__()` (for resyncing a restarted copy)."""
        return await self.call("__ftrl_state__")

    async def restore(self, state: Any) -> Any:
        """Call the actor's `__ftrl_restore__(state)`."""
        return await self.call("__ftrl_restore__", state)


_NOT_SENT = ("failed to connect", "connection refused", "connect failed")


def _never_sent(error: ActorUnavailableError) -> bool:
    """True if gRPC could not even open a connection (the request was not sent)."""
    text = str(error).lower()
    return any(marker in text for marker in _NOT_SENT)


def _dead_error(info: pb.ActorInfo) -> ActorDiedError:
    """The error for a DEAD actor: ActorStartError if its start failed."""
    if info.error_type:
        return ActorStartError(f"actor {info.name} {info.death_reason}", info.error_type)
    return ActorDiedError(f"actor {info.name} is DEAD: {info.death_reason}")

