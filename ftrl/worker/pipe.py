"""Length-prefixed msgpack messages over the pipes between a worker and its actors."""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any

from ftrl.wire import codec

_LEN = struct.Struct(">I")
MAX_PIPE_MESSAGE = 16 << 20


def encode_frame(msg: dict[str, Any]) -> bytes:
    data = codec.encode(msg)
    return _LEN.pack(len(data)) + data


def write_frame(fd: int, msg: dict[str, Any]) -> None:
    """Blocking write of one message to a pipe fd."""
    data = memoryview(encode_frame(msg))
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError("pipe closed")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_frame(fd: int) -> dict[str, Any]:
    """Blocking read of one message from a pipe fd."""
    (size,) = _LEN.unpack(_read_exact(fd, 4))
    if size > MAX_PIPE_MESSAGE:
        raise ValueError(f"pipe message of {size} bytes is too large")
    return codec.decode(_read_exact(fd, size))


async def read_frame_async(reader: asyncio.StreamReader) -> dict[str, Any]:
    """Read one message from an asyncio stream; raises EOFError when the pipe closes."""
    try:
        head = await reader.readexactly(4)
        (size,) = _LEN.unpack(head)
        if size > MAX_PIPE_MESSAGE:
            raise ValueError(f"pipe message of {size} bytes is too large")
        return codec.decode(await reader.readexactly(size))
    except asyncio.IncompleteReadError as e:
        raise EOFError("pipe closed") from e
