"""Register servicers so that malformed protobuf bytes get INVALID_ARGUMENT.

grpc.aio answers a request it cannot parse with UNKNOWN ("Unexpected
DecodeError"), which tells a client nothing about whose fault it was. Here the
generated request deserializers are wrapped: bytes that do not parse become a
marker, and the handler wrapper aborts such a call with INVALID_ARGUMENT and a
message naming the method, before any servicer code sees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from grpc import aio


class _Malformed:
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _strict(deserializer: Callable[[bytes], Any] | None, what: str) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as e:  # google.protobuf.message.DecodeError and friends
            return _Malformed(f"malformed {what} request: {e}")

    return deserialize


async def _checked(requests: AsyncIterator, context: aio.ServicerContext) -> AsyncIterator:
    async for request in requests:
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        yield request


def check(request: Any) -> Any:
    """For handlers registered as self-checking: raise InvalidArgumentError for a
    request that did not parse, else return it."""
    if isinstance(request, _Malformed):
        from ftrl.wire.errors import InvalidArgumentError

        raise InvalidArgumentError(request.message)
    return request


def _wrap(handler: grpc.RpcMethodHandler, what: str, self_checked: bool = False) -> grpc.RpcMethodHandler:
    deserialize = _strict(handler.request_deserializer, what)
    if self_checked:
        # The handler calls check() on each request itself: one wrapper generator
        # less per streamed message (it showed up at the top of the coordinator's
        # profile with thousands of heartbeat streams).
        return handler._replace(request_deserializer=deserialize)
    if handler.request_streaming and handler.response_streaming:
        fn = handler.stream_stream

        async def stream_stream(requests, context):
            async for reply in fn(_checked(requests, context), context):
                yield reply

        return handler._replace(request_deserializer=deserialize, stream_stream=stream_stream)
    if handler.request_streaming:
        fn = handler.stream_unary

        async def stream_unary(requests, context):
            return await fn(_checked(requests, context), context)

        return handler._replace(request_deserializer=deserialize, stream_unary=stream_unary)
    if handler.response_streaming:
        fn = handler.unary_stream

        async def unary_stream(request, context):
            if isinstance(request, _Malformed):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            async for reply in fn(request, context):
                yield reply

        return handler._replace(request_deserializer=deserialize, unary_stream=unary_stream)
    fn = handler.unary_unary

    async def unary_unary(request, context):
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await fn(request, context)

    return handler._replace(request_deserializer=deserialize, unary_unary=unary_unary)


class _Capture:
    """Stands in for a server while a generated add_*_to_server function runs."""

    def __init__(self) -> None:
        self.services: list[tuple[str, dict[str, grpc.RpcMethodHandler]]] = []

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass  # the same handlers also arrive through add_registered_method_handlers

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.services.append((service, handlers))


def add_servicer(
    add_fn: Callable[[Any, Any], None],
    servicer: Any,
    server: aio.Server,
    self_checked: frozenset[str] = frozenset(),
) -> None:
    """`add_fn(servicer, server)` (a generated add_XServicer_to_server), with
    malformed requests answered INVALID_ARGUMENT. Methods named in `self_checked`
    must pass every request through `check()` themselves."""
    capture = _Capture()
    add_fn(servicer, capture)
    if not capture.services:  # generated code of an older grpcio: register it as it is
        add_fn(servicer, server)
        return
    for service, handlers in capture.services:
        short = service.rpartition(".")[2]
        wrapped = {name: _wrap(h, f"{short}.{name}", name in self_checked)
                   for name, h in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
        server.add_registered_method_handlers(service, wrapped)
