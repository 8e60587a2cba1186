"""Length-prefixed msgpack messages over the pipes between a worker and its actors.

Frames are `ftrl.util.framing` with a big-endian u32 length and a 16 MiB cap: a larger
message raises `FrameTooLargeError` (a ValueError) on either side, a pipe that closes
between messages raises EOFError, one that closes inside a message
`FrameTruncatedError` (an EOFError).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ftrl.util.framing import Framing
from ftrl.wire import codec

MAX_PIPE_MESSAGE = 16 << 20
PIPE_FRAMING = Framing("big", MAX_PIPE_MESSAGE, name="pipe")


def encode_frame(msg: dict[str, Any]) -> bytes:
    """One message as a frame (header + msgpack)."""
    return PIPE_FRAMING.pack(codec.encode(msg))


def write_frame(fd: int, msg: dict[str, Any]) -> None:
    """Blocking write of one message to a pipe fd."""
    PIPE_FRAMING.write_fd(fd, codec.encode(msg))


def read_frame(fd: int) -> dict[str, Any]:
    """Blocking read of one message from a pipe fd."""
    return codec.decode(PIPE_FRAMING.read_fd(fd))


async def read_frame_async(reader: asyncio.StreamReader) -> dict[str, Any]:
    """Read one message from an asyncio stream; raises EOFError when the pipe closes."""
    return codec.decode(await PIPE_FRAMING.read_stream(reader))
