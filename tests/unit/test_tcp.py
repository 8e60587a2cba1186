"""Socket helpers of the plain-TCP planes: scatter/gather sends survive partial writes,
exact reads fill a buffer whole or fail on time and on a closed peer."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from ftrl.util.tcp import recv_exact, recv_into_exact, send_parts


def _pair(sndbuf: int = 4096) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)  # many partial sendmsg writes
    return a, b


def test_send_parts_delivers_every_byte_in_order_through_partial_writes():
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, size, dtype=np.uint8) for size in (1, 7, 70_000, 0, 3, 1_500_000)]
    parts = [b"head", *[memoryview(x) for x in arrays], bytes(64), np.float32([1.5, -2]).view(np.uint8)]
    expected = b"".join(bytes(p) for p in parts)
    a, b = _pair()
    got = bytearray(len(expected))
    reader = threading.Thread(target=recv_into_exact, args=(b, got, time.monotonic() + 30))
    reader.start()
    send_parts(a, parts)
    reader.join(30)
    assert bytes(got) == expected
    a.close()
    b.close()


def test_send_parts_takes_more_parts_than_one_sendmsg_allows():
    parts = [bytes([i % 256]) * 3 for i in range(5000)]  # above IOV_MAX (1024)
    a, b = _pair(1 << 20)
    reader_out: list[bytes] = []
    reader = threading.Thread(target=lambda: reader_out.append(recv_exact(b, 15000, time.monotonic() + 30)))
    reader.start()
    send_parts(a, parts)
    reader.join(30)
    assert reader_out == [b"".join(parts)]


def test_recv_into_exact_times_out_and_sees_a_closed_peer():
    a, b = socket.socketpair()
    a.sendall(b"abc")
    buf = bytearray(10)
    with pytest.raises(TimeoutError):
        recv_into_exact(b, buf, time.monotonic() + 0.2)
    a.close()
    with pytest.raises(ConnectionError):
        recv_into_exact(b, bytearray(4), time.monotonic() + 5)
    b.close()
