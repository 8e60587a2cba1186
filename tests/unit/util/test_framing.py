"""Length-prefixed framing shared by the worker pipes and the sub-env sockets."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

from ftrl.rl.sampling import sub_env
from ftrl.util.framing import FrameTooLargeError, FrameTruncatedError, Framing
from ftrl.worker import pipe


def _chunks(data: bytes, step: int = 3):
    """A recv(n) over `data` that hands out at most `step` bytes at a time, then EOF."""
    view = memoryview(data)
    pos = 0

    def recv(n: int) -> bytes:
        nonlocal pos
        out = bytes(view[pos:pos + min(n, step)])
        pos += len(out)
        return out

    return recv


@pytest.mark.parametrize("byteorder, fmt", [("big", ">I"), ("little", "<I")])
def test_roundtrip_and_byte_order(byteorder, fmt):
    framing = Framing(byteorder, 100, name="test")
    frame = framing.pack(b"hello")
    assert frame == struct.pack(fmt, 5) + b"hello"
    recv = _chunks(frame + framing.pack(b"") + framing.pack(b"x" * 100))
    assert framing.read(recv) == b"hello"
    assert framing.read(recv) == b""
    assert framing.read(recv) == b"x" * 100
    with pytest.raises(EOFError, match="test closed") as info:
        framing.read(recv)
    assert not isinstance(info.value, FrameTruncatedError)  # clean EOF between frames


def test_oversize_frames_are_refused_on_both_sides():
    framing = Framing("big", 10, name="test")
    with pytest.raises(FrameTooLargeError, match="11 bytes is too large"):
        framing.pack(b"x" * 11)
    with pytest.raises(FrameTooLargeError) as info:
        framing.read(_chunks(struct.pack(">I", 11) + b"x" * 11))
    assert (info.value.size, info.value.max_size) == (11, 10)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("data, match", [
    (b"\x00\x00", "2 of 4 header bytes"),
    (struct.pack(">I", 8) + b"abc", "3 of 8 payload bytes"),
])
def test_eof_mid_frame_is_a_clear_error(data, match):
    framing = Framing("big", 100, name="test")
    with pytest.raises(FrameTruncatedError, match=f"test closed mid-frame: {match}"):
        framing.read(_chunks(data))


def test_stream_reader_has_the_same_errors():
    framing = Framing("big", 10, name="test")

    async def read(data: bytes) -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await framing.read_stream(reader)

    assert asyncio.run(read(framing.pack(b"abc"))) == b"abc"
    with pytest.raises(EOFError, match=r"test closed$"):
        asyncio.run(read(b""))
    with pytest.raises(FrameTruncatedError, match="1 of 4 header"):
        asyncio.run(read(b"\x00"))
    with pytest.raises(FrameTruncatedError, match="2 of 5 payload"):
        asyncio.run(read(struct.pack(">I", 5) + b"ab"))
    with pytest.raises(FrameTooLargeError):
        asyncio.run(read(struct.pack(">I", 11)))


def test_bad_parameters():
    with pytest.raises(ValueError, match="byteorder"):
        Framing("middle", 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_size"):
        Framing("big", 2**32)


def test_worker_pipe_keeps_its_format_and_limit():
    assert pipe.PIPE_FRAMING.max_size == 16 << 20
    r, w = os.pipe()
    try:
        pipe.write_frame(w, {"kind": "ready", "n": 3})
        assert pipe.read_frame(r) == {"kind": "ready", "n": 3}
        frame = pipe.encode_frame({"a": 1})
        assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4  # big-endian
        os.write(w, struct.pack(">I", (16 << 20) + 1))
        with pytest.raises(ValueError, match="too large"):
            pipe.read_frame(r)
        os.write(w, frame[:-1])
        os.close(w)
        w = -1
        with pytest.raises(EOFError, match="mid-frame"):
            pipe.read_frame(r)
        with pytest.raises(EOFError, match="pipe closed"):
            pipe.read_frame(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_sub_env_socket_keeps_its_format_and_limit():
    assert sub_env._FRAMING.max_size == 1 << 30
    a, b = socket.socketpair()
    with a, b:
        sub_env._child_send(a, ["ok", 1])
        assert sub_env._child_recv(b) == ["ok", 1]
        frame = sub_env._FRAMING.pack(b"\x91\x01")
        assert frame[:4] == struct.pack("<I", 2)  # little-endian
        a.sendall(frame + frame[:-1])  # the second frame is cut short: the parent went away
        a.shutdown(socket.SHUT_WR)
        assert sub_env._child_recv(b) == [1]
        assert sub_env._child_recv(b) is None


def test_remote_sub_env_reports_oversize_and_eof_as_sub_env_errors():
    a, b = socket.socketpair()
    env = sub_env.RemoteSubEnv(2, b, timeout_s=1.0)  # no child process: `a` plays it
    with a, b:
        a.sendall(struct.pack("<I", (1 << 30) + 1))
        with pytest.raises(sub_env.SubEnvError, match=r"sub-environment 2: reply to step is \d+ bytes; too large"):
            env._recv("step")
        a.sendall(struct.pack("<I", 5) + b"ab")
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(sub_env.SubEnvError, match=r"process died .*mid-frame"):
            env._recv("step")
