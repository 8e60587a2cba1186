"""The server inside an actor process: runs calls on the user object, answers pings.

Async methods run on the event loop; sync methods run on a small thread pool
(`max_concurrency` threads, 1 by default so calls are serialized like Ray's
actors) so the loop keeps answering liveness pings during long calls.

A sync method's result is encoded on its call thread (and, for a unary reply, joined
into the one buffer the reply carries), so the loop only hands bytes to gRPC.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
import traceback
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc import aio

from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.chunks import assemble
from ftrl.wire.errors import (
    FtrlError,
    InvalidArgumentError,
    MethodNotFoundError,
    ResourceExhaustedError,
    StaleIncarnationError,
    status_of,
)
from ftrl.wire.limits import CHUNK_BYTES, MAX_CALL_BYTES, check_method
from ftrl.wire.strict import add_servicer, check
from ftrl.worker.fence import CallerFence

log = logging.getLogger(__name__)

FIRST_CHUNK_TIMEOUT_S = 30.0


def remote_error(exc: BaseException) -> pb.RemoteError:
    """Describe a user exception for the caller (type path, message, traceback)."""
    cls = type(exc)
    module = cls.__module__
    name = cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"
    tb = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    return pb.RemoteError(type=name, message=str(exc)[:10_000], traceback=tb[-20_000:])


async def read_payload(first: pb.CallChunk, rest: AsyncIterator[pb.CallChunk], total: int) -> bytearray:
    """Collect a chunked payload of exactly `total` bytes into one buffer."""
    if total < 0 or total > MAX_CALL_BYTES:
        raise ResourceExhaustedError(
            f"call payload of {total} bytes exceeds the limit of {MAX_CALL_BYTES} bytes"
        )
    return await assemble(first.data, (check(chunk).data async for chunk in rest), total)


class ActorServicer(pb_grpc.ActorServicer):
    """Serves one user object as incarnation `incarnation` of actor `name`."""

    def __init__(self, obj: Any, name: str, incarnation: int, max_concurrency: int = 1,
                 fence: CallerFence | None = None) -> None:
        self.obj = obj
        self.fence = fence
        self.name = name
        self.incarnation = incarnation
        self.class_path = f"{type(obj).__module__}:{type(obj).__qualname__}"
        self.started = time.monotonic()
        self.in_flight = 0
        self.executor = ThreadPoolExecutor(max(1, max_concurrency), thread_name_prefix="ftrl-call")

    def _method(self, name: str):
        check_method(name)
        fn = getattr(self.obj, name, None)
        if fn is None or not callable(fn):
            raise MethodNotFoundError(f"actor {self.name} ({self.class_path}) has no method {name!r}")
        return fn

    async def Ping(self, request, context):
        return pb.PingReply(
            name=self.name,
            incarnation=self.incarnation,
            pid=os.getpid(),
            calls_in_flight=self.in_flight,
            uptime_s=time.monotonic() - self.started,
        )

    def _prepare(self, first: pb.CallChunk):
        """Check a call's header; returns the method to run."""
        if not first.HasField("header"):
            raise InvalidArgumentError("the first chunk of a call must carry the header")
        header = first.header
        if header.incarnation and header.incarnation != self.incarnation:
            raise StaleIncarnationError(
                f"stale incarnation: actor {self.name} is incarnation {self.incarnation}, "
                f"the call was meant for incarnation {header.incarnation}"
            )
        if header.total_bytes < 0 or header.total_bytes > MAX_CALL_BYTES:
            raise ResourceExhaustedError(
                f"call payload of {header.total_bytes} bytes exceeds the limit of "
                f"{MAX_CALL_BYTES} bytes"
            )
        return self._method(header.method)

    @staticmethod
    def _arguments(payload: bytearray | bytes) -> tuple[list, dict]:
        call = codec.decode_parts(payload) if payload else [[], {}]
        if (
            not isinstance(call, list)
            or len(call) != 2
            or not isinstance(call[0], list)
            or not isinstance(call[1], dict)
            or not all(isinstance(k, str) for k in call[1])
        ):
            raise InvalidArgumentError("call payload must be [args list, kwargs map with str keys]")
        return call[0], call[1]

    async def _execute(self, fn, args: list, kwargs: dict, join: bool = False) -> tuple[list, int] | pb.RemoteError:
        """Run the method; its encoded result (parts, total; one part if `join`), or the
        error to send back. A sync method runs and is encoded on a call thread."""
        self.in_flight += 1
        try:
            if inspect.iscoroutinefunction(fn):
                return _encode(await fn(*args, **kwargs), join)
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(self.executor, _call_and_encode, fn, args, kwargs, join)
            if isinstance(outcome, _Awaitable):  # a sync method that returned an awaitable
                return _encode(await outcome.value, join)
            return outcome
        except Exception as e:  # user code raised, or its result is not msgpack-able
            return remote_error(e)
        finally:
            self.in_flight -= 1

    async def Call(self, request_iterator, context):
        try:
            async with asyncio.timeout(FIRST_CHUNK_TIMEOUT_S):
                first = await request_iterator.__anext__()
        except (TimeoutError, StopAsyncIteration):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a call needs a header chunk")
            return
        try:
            fn = self._prepare(check(first))
            if self.fence is not None and first.header.caller:
                await self.fence.check(first.header.caller)
            payload = await read_payload(first, request_iterator, first.header.total_bytes)
            args, kwargs = self._arguments(payload)
        except FtrlError as e:
            await context.abort(*status_of(e))
            return
        outcome = await self._execute(fn, args, kwargs)
        if isinstance(outcome, pb.RemoteError):
            yield pb.CallChunk(error=outcome)
            return
        parts, total = outcome
        first_reply = True
        for data in codec.iter_chunks(parts, CHUNK_BYTES):
            if first_reply:
                yield pb.CallChunk(data=data, total_bytes=total)
                first_reply = False
            else:
                yield pb.CallChunk(data=data)

    async def CallUnary(self, request, context):
        try:
            fn = self._prepare(request)
            if self.fence is not None and request.header.caller:
                await self.fence.check(request.header.caller)
            if len(request.data) != request.header.total_bytes:
                raise InvalidArgumentError(
                    f"a unary call must carry its whole payload: {len(request.data)} of "
                    f"{request.header.total_bytes} bytes")
            args, kwargs = self._arguments(request.data)
        except FtrlError as e:
            await context.abort(*status_of(e))
            return None
        outcome = await self._execute(fn, args, kwargs, join=True)
        if isinstance(outcome, pb.RemoteError):
            return pb.CallChunk(error=outcome)
        (data,), total = outcome
        return pb.CallChunk(data=data, total_bytes=total)

    async def drain(self, grace_s: float) -> str:
        """Run the object's optional `__ftrl_drain__()` like a call (sync ones on the call
        threads, after the calls before it), for at most `grace_s`; says how it went."""
        hook = getattr(self.obj, "__ftrl_drain__", None)
        if not callable(hook):
            return "it has no __ftrl_drain__"
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(grace_s):
                await self._run(hook, [], {})
        except TimeoutError:
            return f"__ftrl_drain__ did not finish within {grace_s:g}s"
        except Exception as e:  # user code: log it, then stop as asked
            log.warning("actor %s: __ftrl_drain__ raised", self.name, exc_info=True)
            return f"__ftrl_drain__ raised {type(e).__name__}: {e}"
        return f"__ftrl_drain__ finished in {time.monotonic() - t0:.2f}s"

    async def _run(self, fn, args: list, kwargs: dict) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))
        if inspect.isawaitable(result):
            result = await result
        return result


class _Awaitable:
    """What a sync method returned when it is awaitable (awaited on the loop)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _encode(result: Any, join: bool) -> tuple[list, int]:
    """A result as payload parts and their total size (one bytes part if `join`)."""
    parts, total = codec.encode_parts(result)
    if join and len(parts) != 1:
        parts = [b"".join(parts)]
    return parts, total


def _call_and_encode(fn, args: list, kwargs: dict, join: bool) -> tuple[list, int] | _Awaitable:
    """On a call thread: run a sync method and encode its result."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return _Awaitable(result)
    return _encode(result, join)


def new_actor_server(servicer: ActorServicer, security, max_message: int) -> aio.Server:
    """A grpc.aio server for one actor with the token guard and size caps.

    Requests are capped at `max_message` (streamed calls come in 1 MiB chunks);
    a unary reply carries a whole result, so replies may reach MAX_CALL_BYTES.
    """
    from ftrl.wire.grpcopts import server_options

    options = [o for o in server_options(max_message) if o[0] != "grpc.max_send_message_length"]
    options.append(("grpc.max_send_message_length", MAX_CALL_BYTES + CHUNK_BYTES))
    server = aio.server(options=options)
    add_servicer(pb_grpc.add_ActorServicer_to_server, servicer, server,
                 self_checked=frozenset({"Call"}), token=security.token)
    return server
