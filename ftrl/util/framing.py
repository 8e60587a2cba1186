"""Length-prefixed frames: a u32 length, then that many payload bytes.

One implementation for every byte stream that carries messages: the worker's control
pipes to its actor hosts (big-endian, 16 MiB cap, `ftrl.worker.pipe`) and the socket
to a remote sub-environment (little-endian, 1 GiB cap, `ftrl.rl.sampling.sub_env`). A `Framing`
fixes the byte order and the largest frame; the payload is opaque bytes (the users put
`ftrl.wire.codec` msgpack in it).

Errors, the same for every transport:
- a frame larger than `max_size` (announced by its header, before its body is read):
  `FrameTooLargeError` (a ValueError) with the size and the limit;
- the stream ends exactly between frames: `EOFError` ("<name> closed");
- the stream ends inside a frame: `FrameTruncatedError` (an EOFError) saying how many
  of how many bytes arrived.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Callable
from typing import Literal


class FrameTooLargeError(ValueError):
    """A frame header announced more bytes than the framing allows."""

    def __init__(self, name: str, size: int, max_size: int):
        super().__init__(f"{name} frame of {size} bytes is too large (limit {max_size} bytes)")
        self.size = size
        self.max_size = max_size


class FrameTruncatedError(EOFError):
    """The stream ended inside a frame."""

    def __init__(self, name: str, got: int, expected: int, part: str):
        super().__init__(f"{name} closed mid-frame: {got} of {expected} {part} bytes arrived")
        self.got = got
        self.expected = expected


class Framing:
    """Frames with a u32 length header in `byteorder`, payloads up to `max_size` bytes.

    `name` is used in error messages ("pipe", "sub-env socket")."""

    def __init__(self, byteorder: Literal["big", "little"], max_size: int, name: str = "stream"):
        if byteorder not in ("big", "little"):
            raise ValueError(f"byteorder must be 'big' or 'little', got {byteorder!r}")
        if not 0 < max_size < 2**32:
            raise ValueError(f"max_size must be in (0, 2**32), got {max_size}")
        self.header = struct.Struct(">I" if byteorder == "big" else "<I")
        self.max_size = max_size
        self.name = name

    def pack(self, payload: bytes) -> bytes:
        """Header + payload (FrameTooLargeError if the payload is over the limit)."""
        if len(payload) > self.max_size:
            raise FrameTooLargeError(self.name, len(payload), self.max_size)
        return self.header.pack(len(payload)) + payload

    def body_size(self, header: bytes) -> int:
        """The payload size a header announces (FrameTooLargeError over the limit)."""
        (size,) = self.header.unpack(header)
        if size > self.max_size:
            raise FrameTooLargeError(self.name, size, self.max_size)
        return size

    def read(self, recv: Callable[[int], bytes]) -> bytes:
        """Read one frame's payload with `recv(n)` (returns up to n bytes, b"" at EOF),
        e.g. `lambda n: os.read(fd, n)` or `sock.recv`. Errors of `recv` pass through."""
        head = self._read_exact(recv, self.header.size, "header", boundary=True)
        size = self.body_size(head)
        return self._read_exact(recv, size, "payload", boundary=False)

    def read_fd(self, fd: int) -> bytes:
        """Blocking read of one frame's payload from a file descriptor."""
        return self.read(lambda n: os.read(fd, n))

    def write_fd(self, fd: int, payload: bytes) -> None:
        """Blocking write of one frame to a file descriptor."""
        data = memoryview(self.pack(payload))
        while data:
            n = os.write(fd, data)
            data = data[n:]

    async def read_stream(self, reader: asyncio.StreamReader) -> bytes:
        """Read one frame's payload from an asyncio stream."""
        try:
            head = await reader.readexactly(self.header.size)
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                raise EOFError(f"{self.name} closed") from e
            raise FrameTruncatedError(self.name, len(e.partial), self.header.size, "header") from e
        size = self.body_size(head)
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            raise FrameTruncatedError(self.name, len(e.partial), size, "payload") from e

    def _read_exact(self, recv: Callable[[int], bytes], n: int, part: str, boundary: bool) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = recv(n - len(buf))
            if not chunk:
                if boundary and not buf:
                    raise EOFError(f"{self.name} closed")
                raise FrameTruncatedError(self.name, len(buf), n, part)
            buf += chunk
        return bytes(buf)
