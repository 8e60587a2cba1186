"""Reassembling a payload that arrives as a stream of chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ftrl.wire.errors import InvalidArgumentError


async def assemble(first: bytes, rest: AsyncIterator[bytes], total: int) -> bytearray:
    """Copy chunks into a buffer of `total` bytes; refuses a short or long payload."""
    buf = bytearray(total)
    size = len(first)
    if size > total:
        raise InvalidArgumentError(f"payload has more than the {total} bytes its header says")
    buf[:size] = first
    if size < total:
        async for data in rest:
            end = size + len(data)
            if end > total:
                raise InvalidArgumentError(f"payload has more than the {total} bytes its header says")
            buf[size:end] = data
            size = end
            if size == total:
                break
    if size != total:
        raise InvalidArgumentError(f"payload has {size} bytes but its header says {total}")
    return buf
