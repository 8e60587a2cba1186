"""A raw grpc.aio echo server (no ftrl) used as the ceiling by call_rate.py.

Methods on service t.Raw with raw-bytes (de)serializers:
  Unary: unary echo of a small message.
  Stream: stream-stream; reads all request chunks, replies with `reply_size`
          bytes (first 8 bytes of the first chunk, little-endian) in 1 MiB chunks.
Prints its port on stdout, then serves until killed.
"""

from __future__ import annotations

import grpc
from grpc import aio

CHUNK = 1 << 20


def _ident(x: bytes) -> bytes:
    return x


async def _unary(request: bytes, context) -> bytes:
    return request


async def _stream(request_iterator, context):
    reply_size = None
    async for chunk in request_iterator:
        if reply_size is None:
            reply_size = int.from_bytes(chunk[:8], "little")
    payload = b"\0" * (reply_size or 1)
    for start in range(0, len(payload), CHUNK):
        yield payload[start : start + CHUNK]


async def main() -> None:
    server = aio.server(options=[("grpc.max_receive_message_length", 4 << 20),
                                 ("grpc.max_send_message_length", 4 << 20)])
    handler = grpc.method_handlers_generic_handler("t.Raw", {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary, _ident, _ident),
        "Stream": grpc.stream_stream_rpc_method_handler(_stream, _ident, _ident),
    })
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
