"""Reassembling a payload that arrives as a stream of chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ftrl.wire.errors import InvalidArgumentError


async def assemble(first: bytes, rest: AsyncIterator[bytes], total: int) -> bytearray:
    """Collect chunks into one buffer of exactly `total` bytes; refuses a short or long payload.

    The buffer grows as data arrives (large buffers grow by remapping, not copying)
    instead of being allocated at the declared size up front: a 20-byte header that
    claims a 1 GiB payload must not make the receiver zero 1 GiB on its event loop.
    """
    if len(first) > total:
        raise InvalidArgumentError(f"payload has more than the {total} bytes its header says")
    buf = bytearray(first)
    if len(buf) < total:
        async for data in rest:
            if len(buf) + len(data) > total:
                raise InvalidArgumentError(f"payload has more than the {total} bytes its header says")
            buf += data
            if len(buf) == total:
                break
    if len(buf) != total:
        raise InvalidArgumentError(f"payload has {len(buf)} bytes but its header says {total}")
    return buf
