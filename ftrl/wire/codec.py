"""msgpack payloads with numpy arrays as raw bytes. Nothing is ever unpickled.

An array travels as msgpack extension type 1 whose data is:
    u8 len(dtype) | dtype.str (ascii, e.g. "<f4") | u8 ndim | ndim x u64 shape | raw bytes
Only plain numeric, bool and fixed-width string dtypes are accepted, and the raw
byte count must match dtype and shape exactly.

Decoding is strict and bounded: sizes of strings, binaries, arrays, maps and
extension payloads are capped, map keys must be str, int or bytes, and the whole
payload must be consumed.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ftrl.wire.errors import InvalidArgumentError, ResourceExhaustedError

NUMPY_EXT = 1
_ALLOWED_KINDS = frozenset("biufc?SU")  # no object, void, datetime
# What numpy's dtype.str looks like for those kinds ("<f4", "|b1", "<U5"); anything
# else is refused before numpy parses it (np.dtype() evaluates some strings).
_DTYPE_RE = re.compile(r"^[<>|=][biufcSU]\d{1,5}$")
_MAX_NDIM = 32


@dataclass(frozen=True)
class DecodeLimits:
    """Caps applied while decoding untrusted msgpack."""

    max_bytes: int = 1 << 30  # total payload
    max_str_len: int = 1 << 24
    max_bin_len: int = 1 << 30
    max_array_len: int = 1 << 24
    max_map_len: int = 1 << 20
    max_ext_len: int = 1 << 30
    max_depth: int = 64


DEFAULT_LIMITS = DecodeLimits()
#: Limits for small control-plane payloads (actor kwargs, job configs).
SMALL_LIMITS = DecodeLimits(
    max_bytes=1 << 20,
    max_str_len=1 << 20,
    max_bin_len=1 << 20,
    max_array_len=1 << 16,
    max_map_len=1 << 14,
    max_ext_len=1 << 20,
    max_depth=32,
)


def _encode_array(arr: np.ndarray) -> msgpack.ExtType:
    if arr.dtype.kind not in _ALLOWED_KINDS:
        raise InvalidArgumentError(f"cannot send numpy dtype {arr.dtype} (only numeric, bool, str)")
    # tobytes() is C order whatever the layout; np.ascontiguousarray would turn a
    # 0-d array into shape (1,).
    dtype = arr.dtype.str.encode("ascii")
    header = struct.pack(f"<B{len(dtype)}sB{arr.ndim}Q", len(dtype), dtype, arr.ndim, *arr.shape)
    return msgpack.ExtType(NUMPY_EXT, header + arr.tobytes())


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return _encode_array(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    # torch tensors and anything else array-like must be converted by the caller
    raise InvalidArgumentError(
        f"cannot encode a value of type {type(obj).__module__}.{type(obj).__qualname__}: "
        "payloads must be msgpack-able (None, bool, int, float, str, bytes, list, dict) "
        "or numpy arrays"
    )


def encode(obj: Any) -> bytes:
    """Serialize `obj` (msgpack types and numpy arrays) to bytes."""
    try:
        return msgpack.packb(obj, default=_default, use_bin_type=True, strict_types=False)
    except InvalidArgumentError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidArgumentError(f"cannot encode payload: {e}") from e


def _array_header(data: bytes | memoryview) -> tuple[np.dtype, tuple[int, ...], int, int]:
    """Parse dtype and shape; returns (dtype, shape, header length, byte count)."""
    try:
        n = data[0]
        dtype_str = bytes(data[1 : 1 + n]).decode("ascii")
        pos = 1 + n
        ndim = data[pos]
        pos += 1
        if ndim > _MAX_NDIM:
            raise ValueError(f"ndim {ndim} > {_MAX_NDIM}")
        shape = struct.unpack_from(f"<{ndim}Q", data, pos)
        pos += 8 * ndim
        if not _DTYPE_RE.match(dtype_str):
            raise InvalidArgumentError(
                f"numpy dtype {dtype_str[:20]!r} is not allowed on the wire "
                "(plain numeric, bool and str dtypes only)")
        dtype = np.dtype(dtype_str)
    except (IndexError, struct.error, TypeError, ValueError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"malformed numpy array in payload: {e}") from e
    if dtype.kind not in _ALLOWED_KINDS or dtype.hasobject:
        raise InvalidArgumentError(f"numpy dtype {dtype_str!r} is not allowed on the wire")
    count = 1
    for dim in shape:
        count *= dim
    return dtype, tuple(shape), pos, count * dtype.itemsize


def _decode_array(data: bytes) -> np.ndarray:
    dtype, shape, pos, nbytes = _array_header(data)
    if nbytes != len(data) - pos:
        raise InvalidArgumentError(
            f"malformed numpy array: shape {shape} x {dtype} needs "
            f"{nbytes} bytes, got {len(data) - pos}"
        )
    # A writable copy: callers may hand it straight to torch.
    return np.frombuffer(bytearray(data[pos:]), dtype=dtype).reshape(shape)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == NUMPY_EXT:
        return _decode_array(data)
    raise InvalidArgumentError(f"unknown msgpack extension type {code}")


_MAP_KEY_TYPES = (str, int, bytes)


def _check_tree(obj: Any, limit: int) -> None:
    """Refuse nesting deeper than `limit` and map keys other than str, int or bytes."""
    stack = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise InvalidArgumentError(f"payload nested deeper than {limit} levels")
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, _MAP_KEY_TYPES):
                    raise InvalidArgumentError(
                        f"malformed payload: map key of type {type(key).__name__} "
                        "(keys must be str, int or bytes)"
                    )
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def decode(data: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Deserialize bytes made by `encode`, refusing anything malformed or oversized."""
    if len(data) > limits.max_bytes:
        raise ResourceExhaustedError(
            f"payload of {len(data)} bytes exceeds the limit of {limits.max_bytes} bytes"
        )
    return _unpack(data, limits, _ext_hook)


def _unpack(data: bytes | memoryview, limits: DecodeLimits, ext_hook) -> Any:
    try:
        unpacker = msgpack.Unpacker(
            raw=False,
            strict_map_key=False,  # int keys are fine; key types are checked below
            ext_hook=ext_hook,
            use_list=True,
            max_buffer_size=max(len(data), 1),
            max_str_len=limits.max_str_len,
            max_bin_len=limits.max_bin_len,
            max_array_len=limits.max_array_len,
            max_map_len=limits.max_map_len,
            max_ext_len=limits.max_ext_len,
        )
        unpacker.feed(data)
        obj = unpacker.unpack()
        try:
            unpacker.unpack()
        except msgpack.OutOfData:
            pass
        else:
            raise InvalidArgumentError("malformed payload: trailing data after the first object")
    except (InvalidArgumentError, ResourceExhaustedError):
        raise
    except msgpack.OutOfData as e:
        raise InvalidArgumentError("malformed payload: truncated msgpack data") from e
    except RecursionError as e:
        raise InvalidArgumentError("payload nested too deeply") from e
    except (ValueError, TypeError, msgpack.UnpackException, msgpack.ExtraData) as e:
        raise InvalidArgumentError(f"malformed payload: {e}") from e
    _check_tree(obj, limits.max_depth)
    return obj


# ---------------------------------------------------------------- call payloads
#
# Call arguments and results can hold large arrays. Copying them through
# msgpack costs several full copies, so call payloads keep arrays of
# OOB_MIN_BYTES or more *out of band*:
#     u32 len(meta) | meta (msgpack) | array bytes, back to back
# where each such array is extension type 2 in meta:
#     dtype/shape header as for type 1 | u64 offset | u64 nbytes (into the array area)
# The sender hands the array memory to the transport without copying it into
# msgpack; the receiver assembles the payload into one bytearray and returns
# arrays as writable views of it.

OOB_EXT = 2
OOB_MIN_BYTES = 64 << 10
OOB_ALIGN = 64  # the array area and every array in it start on a 64-byte boundary
_META_LEN = struct.Struct("<I")
_OOB_TAIL = struct.Struct("<QQ")


def encode_parts(obj: Any, oob_min_bytes: int = OOB_MIN_BYTES) -> tuple[list[bytes | memoryview], int]:
    """Encode a call payload; returns its parts (to be sent back to back) and total size.
    Arrays of `oob_min_bytes` or more travel out of band (their memory is a part)."""
    buffers: list[bytes | memoryview] = []
    offset = 0

    def default(o: Any) -> Any:
        nonlocal offset
        if isinstance(o, np.ndarray) and o.nbytes >= oob_min_bytes and o.ndim > 0:
            pad = -offset % OOB_ALIGN
            if pad:
                buffers.append(bytes(pad))
                offset += pad
            if o.dtype.kind not in _ALLOWED_KINDS:
                raise InvalidArgumentError(
                    f"cannot send numpy dtype {o.dtype} (only numeric, bool, str)")
            a = o if o.flags.c_contiguous else np.ascontiguousarray(o)
            dtype = a.dtype.str.encode("ascii")
            header = struct.pack(f"<B{len(dtype)}sB{a.ndim}Q", len(dtype), dtype, a.ndim, *a.shape)
            buffers.append(memoryview(a.reshape(-1).view(np.uint8)))
            ext = msgpack.ExtType(OOB_EXT, header + _OOB_TAIL.pack(offset, a.nbytes))
            offset += a.nbytes
            return ext
        return _default(o)

    try:
        meta = msgpack.packb(obj, default=default, use_bin_type=True, strict_types=False)
    except InvalidArgumentError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidArgumentError(f"cannot encode payload: {e}") from e
    head = _META_LEN.size + len(meta)
    gap = bytes(-head % OOB_ALIGN) if buffers else b""
    parts: list[bytes | memoryview] = [_META_LEN.pack(len(meta)), meta, gap, *buffers]
    return parts, head + len(gap) + offset


def decode_parts(buf: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Decode a payload made by `encode_parts` (arrays are views of `buf`)."""
    view = memoryview(buf)
    if len(view) > limits.max_bytes:
        raise ResourceExhaustedError(
            f"payload of {len(view)} bytes exceeds the limit of {limits.max_bytes} bytes"
        )
    if len(view) < _META_LEN.size:
        raise InvalidArgumentError("malformed payload: shorter than its length prefix")
    (meta_len,) = _META_LEN.unpack_from(view, 0)
    if meta_len > len(view) - _META_LEN.size:
        raise InvalidArgumentError("malformed payload: meta length exceeds the payload")
    meta = view[_META_LEN.size : _META_LEN.size + meta_len]
    head = _META_LEN.size + meta_len
    area = view[head + (-head % OOB_ALIGN if len(view) > head else 0) :]

    def ext_hook(code: int, data: bytes) -> Any:
        if code == NUMPY_EXT:
            return _decode_array(data)
        if code != OOB_EXT:
            raise InvalidArgumentError(f"unknown msgpack extension type {code}")
        dtype, shape, pos, nbytes = _array_header(data)
        if len(data) - pos != _OOB_TAIL.size:
            raise InvalidArgumentError("malformed out-of-band array reference")
        offset, size = _OOB_TAIL.unpack_from(data, pos)
        if size != nbytes or offset + size > len(area):
            raise InvalidArgumentError(
                f"malformed out-of-band array: {shape} x {dtype} at {offset}+{size} "
                f"outside the {len(area)}-byte array area"
            )
        return np.frombuffer(area, dtype=dtype, count=nbytes // dtype.itemsize if dtype.itemsize else 0,
                             offset=offset).reshape(shape)

    return _unpack(meta, limits, ext_hook)


def iter_chunks(parts: list[bytes | memoryview], chunk: int):
    """Yield the concatenation of `parts` as bytes objects of at most `chunk` bytes."""
    pending: list[bytes] = []
    size = 0
    for part in parts:
        view = memoryview(part)
        while view:
            take = min(chunk - size, len(view))
            pending.append(bytes(view[:take]))
            size += take
            view = view[take:]
            if size == chunk:
                yield pending[0] if len(pending) == 1 else b"".join(pending)
                pending, size = [], 0
    if pending:
        yield b"".join(pending)


def check_encodable(obj: Any, what: str = "value") -> bytes:
    """Encode `obj`, raising InvalidArgumentError that names `what` if it cannot be."""
    try:
        return encode(obj)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{what} is not msgpack-able: {e}") from None
