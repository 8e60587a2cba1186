"""The msgpack + numpy payload codec: roundtrips, and strict refusal of bad bytes."""

from __future__ import annotations

import struct

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftrl.wire import codec
from ftrl.wire.errors import InvalidArgumentError, ResourceExhaustedError

DTYPES = ["<f2", "<f4", "<f8", ">f4", "|i1", "<i2", "<i4", "<i8", ">i8", "|u1", "<u2", "<u4",
          "<u8", "|b1", "<c8", "<c16", "|S5", "<U3"]
SHAPES = [(), (0,), (1,), (7,), (3, 4), (2, 0, 3), (2, 3, 4, 5)]


def _array(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    dt = np.dtype(dtype)
    if dt.kind == "S":
        flat = np.array([f"s{i}".encode() for i in range(n)], dtype=dt)
    elif dt.kind == "U":
        flat = np.array([f"u{i}" for i in range(n)], dtype=dt)
    elif dt.kind == "b":
        flat = np.arange(n) % 2 == 0
    else:
        flat = (np.arange(n) % 100).astype(dt)
    return flat.reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_array_roundtrip(dtype, shape):
    arr = _array(dtype, shape)
    out = codec.decode(codec.encode(arr))
    assert isinstance(out, np.ndarray)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)
    out.flat[:1] = arr.flat[:1]  # writable (a copy, not a view of the payload)


def test_non_contiguous_arrays_roundtrip():
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    for arr in (base.T, base[:, ::2, 1:], base[::-1], np.asfortranarray(base)):
        out = codec.decode(codec.encode(arr))
        np.testing.assert_array_equal(out, arr)
        assert out.flags.c_contiguous


def test_nested_values_roundtrip():
    value = {
        "obs": np.ones((2, 3), np.float32), "list": [1, -2, 3.5, None, True, "x", b"\x00\xff"],
        "nested": {"deep": [{"a": np.int64(7)}]}, 0: "int key", -5: [1], b"raw": {},
        "big": 2**64 - 1, "neg": -(2**63),
    }
    out = codec.decode(codec.encode(value))
    assert out["list"] == value["list"] and out["big"] == 2**64 - 1 and out["neg"] == -(2**63)
    assert out[0] == "int key" and out[-5] == [1] and out[b"raw"] == {}
    assert out["nested"] == {"deep": [{"a": 7}]}
    np.testing.assert_array_equal(out["obs"], value["obs"])


def test_numpy_scalars_and_sets_become_plain_values():
    assert codec.decode(codec.encode(np.float32(1.5))) == 1.5
    assert codec.decode(codec.encode(np.bool_(True))) is True
    assert sorted(codec.decode(codec.encode({1, 2, 3}))) == [1, 2, 3]
    assert codec.decode(codec.encode((1, 2))) == [1, 2]


@pytest.mark.parametrize(
    "value",
    [object(), np.array([object()], dtype=object), np.zeros(2, dtype="V4"),
     np.array(["2020-01-01"], dtype="datetime64[D]"), {"f": lambda: 1}, 2**64, complex(1, 2)],
)
def test_unencodable_values(value):
    with pytest.raises(InvalidArgumentError):
        codec.encode(value)


def test_check_encodable_names_what():
    with pytest.raises(InvalidArgumentError, match="actor kwargs is not msgpack-able"):
        codec.check_encodable({"x": object()}, "actor kwargs")


def _ext(dtype: bytes, shape: tuple[int, ...], raw: bytes, ndim: int | None = None) -> bytes:
    ndim = len(shape) if ndim is None else ndim
    data = struct.pack(f"<B{len(dtype)}sB", len(dtype), dtype, ndim) + struct.pack(f"<{len(shape)}Q", *shape) + raw
    return msgpack.packb(msgpack.ExtType(codec.NUMPY_EXT, data))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (codec.encode({"a": [1, 2, 3]})[:-1], "truncated"),
        (codec.encode({"a": 1}) + b"\x01", "trailing"),
        (codec.encode(1) + codec.encode(2), "trailing"),
        (b"\xc1", "malformed"),  # a reserved msgpack byte
        (b"", "truncated"),
        (msgpack.packb(msgpack.ExtType(42, b"xx")), "unknown msgpack extension type 42"),
        (_ext(b"|O", (1,), b"\x00" * 8), "dtype"),
        (_ext(b"|V4", (1,), b"\x00" * 4), "dtype"),
        (_ext(b"<M8[s]", (1,), b"\x00" * 8), "dtype"),
        (_ext(b"<f4", (3,), b"\x00" * 8), "needs 12 bytes, got 8"),
        (_ext(b"<f4", (2**40, 2**40), b""), "malformed numpy array"),
        (_ext(b"<f4", (1,) * 33, b"\x00" * 4), "ndim"),
        (_ext(b"<f4", (4,), b"", ndim=4)[:-1], "malformed"),
        (_ext(b"not-a-dtype", (1,), b"\x00"), "malformed numpy array"),
        (_ext(b"\xff\xfe", (1,), b"\x00"), "malformed numpy array"),
        (msgpack.packb(msgpack.ExtType(codec.NUMPY_EXT, b"")), "malformed numpy array"),
        (msgpack.packb({1.5: 1}), "map key"),
        (msgpack.packb({None: 1}), "map key"),
        (b"\x81\x91\x01\x02", "unhashable"),  # a map whose key is a list
        (b"\x91" * 100 + b"\x01", "nested"),
    ],
)
def test_malformed_payloads_are_invalid_argument(payload, match):
    with pytest.raises(InvalidArgumentError, match=match):
        codec.decode(payload)


def test_oversized_payloads():
    with pytest.raises(ResourceExhaustedError, match="exceeds the limit"):
        codec.decode(b"\x00" * ((1 << 20) + 1), codec.SMALL_LIMITS)
    big_str = msgpack.packb("x" * ((1 << 20) + 1))
    with pytest.raises((InvalidArgumentError, ResourceExhaustedError)):
        codec.decode(big_str + b"", codec.DecodeLimits(max_bytes=1 << 22, max_str_len=1 << 20))
    many = msgpack.packb(list(range(70_000)))
    with pytest.raises((InvalidArgumentError, ResourceExhaustedError)):
        codec.decode(many, codec.SMALL_LIMITS)
    # a header that claims a huge array but carries no data
    with pytest.raises(InvalidArgumentError):
        codec.decode(b"\xdd\xff\xff\xff\xff")
    with pytest.raises(InvalidArgumentError):
        codec.decode(b"\xdb\xff\xff\xff\xff")  # str32 of 4 GiB


def test_depth_limit_is_exact():
    ok = codec.encode([[[[1]]]])
    assert codec.decode(ok, codec.DecodeLimits(max_depth=4)) == [[[[1]]]]
    with pytest.raises(InvalidArgumentError, match="deeper than 3"):
        codec.decode(ok, codec.DecodeLimits(max_depth=3))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=256))
def test_random_bytes_raise_only_codec_errors(data):
    try:
        codec.decode(data, codec.SMALL_LIMITS)
    except (InvalidArgumentError, ResourceExhaustedError):
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(0, 200), st.integers(0, 255))
def test_mutated_valid_payloads_raise_only_codec_errors(extra, position, byte):
    valid = bytearray(codec.encode({"obs": np.arange(6, dtype=np.float32).reshape(2, 3), "k": [1, "a"]}))
    valid[position % len(valid)] = byte
    for data in (bytes(valid), bytes(valid) + extra, bytes(valid[: position % len(valid)])):
        try:
            codec.decode(data)
        except (InvalidArgumentError, ResourceExhaustedError):
            pass


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=5) | st.integers(-100, 100), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(json_like)
def test_roundtrip_of_plain_values(value):
    assert codec.decode(codec.encode(value)) == value


# ---------------------------------------------------------------- call payloads (arrays out of band)


def _joined(obj) -> bytearray:
    parts, total = codec.encode_parts(obj)
    data = bytearray(b"".join(bytes(p) for p in parts))
    assert len(data) == total
    return data


def test_call_payload_roundtrip_with_out_of_band_arrays():
    big = np.arange(codec.OOB_MIN_BYTES // 4 + 3, dtype=np.float32)  # out of band
    odd = np.arange(codec.OOB_MIN_BYTES + 1, dtype=np.int8)  # out of band, odd size
    small = np.arange(6, dtype=np.int64).reshape(2, 3)  # in band
    strided = np.arange(4 * codec.OOB_MIN_BYTES, dtype=np.float64).reshape(-1, 4)[:, ::2]
    scalar = np.array(2.5)
    value = [[odd, {"big": big, "small": small}], {"strided": strided, "scalar": scalar, 0: "k"}]
    out = codec.decode_parts(_joined(value))
    args, kwargs = out
    np.testing.assert_array_equal(args[0], odd)
    np.testing.assert_array_equal(args[1]["big"], big)
    np.testing.assert_array_equal(args[1]["small"], small)
    np.testing.assert_array_equal(kwargs["strided"], strided)
    assert kwargs["scalar"].shape == () and kwargs["scalar"] == 2.5
    assert kwargs[0] == "k"
    assert args[1]["big"].dtype == np.float32 and args[1]["big"].flags.writeable
    # plain values need no array area
    assert codec.decode_parts(_joined({"a": [1, 2]})) == {"a": [1, 2]}


def _oob_ref(dtype: bytes, shape: tuple[int, ...], offset: int, nbytes: int) -> msgpack.ExtType:
    header = struct.pack(f"<B{len(dtype)}sB{len(shape)}Q", len(dtype), dtype, len(shape), *shape)
    return msgpack.ExtType(codec.OOB_EXT, header + struct.pack("<QQ", offset, nbytes))


def _call_payload(meta_obj, area: bytes = b"") -> bytes:
    meta = msgpack.packb(meta_obj, use_bin_type=True)
    return struct.pack("<I", len(meta)) + meta + area


@pytest.mark.parametrize(
    "payload",
    [
        b"", b"\x01", b"\x01\x02\x03",
        struct.pack("<I", 100) + b"\x90",  # meta longer than the payload
        _call_payload([1])[:-1],
        _call_payload([_oob_ref(b"<f4", (4,), 0, 16)], b"\x00" * 8),  # outside the area
        _call_payload([_oob_ref(b"<f4", (4,), 2**63, 16)], b"\x00" * 16),
        _call_payload([_oob_ref(b"<f4", (4,), 0, 12)], b"\x00" * 16),  # size disagrees with shape
        _call_payload([_oob_ref(b"|O", (1,), 0, 8)], b"\x00" * 8),
        _call_payload([msgpack.ExtType(codec.OOB_EXT, b"\x03<f4\x01" + b"\x00" * 8)]),  # no tail
        _call_payload([msgpack.ExtType(9, b"x")]),
    ],
)
def test_malformed_call_payloads(payload):
    with pytest.raises(InvalidArgumentError):
        codec.decode_parts(bytearray(payload))


def test_oversized_call_payload():
    with pytest.raises(ResourceExhaustedError):
        codec.decode_parts(bytearray(100), codec.DecodeLimits(max_bytes=99))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256))
def test_random_call_payloads_raise_only_codec_errors(data):
    try:
        codec.decode_parts(bytearray(data))
    except (InvalidArgumentError, ResourceExhaustedError):
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 255), st.integers(0, 64))
def test_mutated_call_payloads_raise_only_codec_errors(position, byte, cut):
    arr = np.arange(codec.OOB_MIN_BYTES // 8, dtype=np.float64)
    valid = _joined([[arr, np.ones(3, np.int8)], {"x": "y"}])
    meta_end = 4 + struct.unpack_from("<I", valid)[0]
    valid[position % meta_end] = byte  # the length prefix and meta are what is parsed
    for data in (valid, valid[: len(valid) - cut]):
        try:
            codec.decode_parts(bytearray(data))
        except (InvalidArgumentError, ResourceExhaustedError):
            pass
