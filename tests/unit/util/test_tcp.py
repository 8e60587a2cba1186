"""Socket helpers of the plain-TCP planes: scatter/gather sends survive partial writes,
exact reads fill a buffer whole or fail on time and on a closed peer, a busy-poll sees
data arriving, gives up on time and leaves the socket as it found it."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from ftrl.util.tcp import busy_poll_readable, recv_body, recv_exact, recv_into_exact, send_parts


def _pair(sndbuf: int = 4096) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    a.settimeout(30)  # a socket with a timeout is non-blocking underneath: sendmsg writes part
    return a, b


class _Trickle:
    """A connection whose sendmsg takes a random, small number of bytes per call."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.out = bytearray()
        self.calls = 0

    def sendmsg(self, buffers) -> int:
        self.calls += 1
        budget = int(self.rng.integers(1, 5000))
        sent = 0
        for b in buffers:
            take = bytes(b[: budget - sent])
            self.out += take
            sent += len(take)
            if sent == budget:
                break
        return sent


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


@pytest.mark.parametrize("seed", range(20))
def test_send_parts_resumes_exactly_where_each_partial_write_stopped(seed):
    rng = np.random.default_rng(seed)
    parts = [bytes(rng.integers(0, 255, int(n), dtype=np.uint8)) for n in rng.integers(0, 3000, 12)]
    conn = _Trickle(seed)
    send_parts(conn, [memoryview(p) if i % 2 else p for i, p in enumerate(parts)])
    assert bytes(conn.out) == b"".join(parts)
    assert conn.calls > 1


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


def test_recv_body_grows_with_the_data_and_a_huge_header_alone_costs_nothing():
    a, b = socket.socketpair()
    payload = np.random.default_rng(1).integers(0, 255, 3_000_000, dtype=np.uint8).tobytes()
    sender = threading.Thread(target=a.sendall, args=(payload,))
    sender.start()
    got = recv_body(b, len(payload), time.monotonic() + 30, first=1 << 16)
    sender.join(30)
    assert bytes(got) == payload
    # a peer announcing 1 GiB that sends 10 bytes and closes: a small buffer, then an error
    a.sendall(b"0123456789")
    a.close()
    t0 = time.monotonic()
    with pytest.raises(ConnectionError):
        recv_body(b, 1 << 30, time.monotonic() + 30)
    assert time.monotonic() - t0 < 1.0  # no 1 GiB zero-fill first
    b.close()


def test_busy_poll_sees_data_that_arrives_while_it_spins_and_leaves_it_unread():
    a, b = socket.socketpair()
    b.settimeout(2.5)
    timer = threading.Timer(0.05, a.sendall, args=(b"xyz",))
    timer.start()
    t0 = time.monotonic()
    assert busy_poll_readable(b, 20.0) is True
    assert time.monotonic() - t0 < 10.0  # it returned on the data, not at the budget's end
    timer.join(5)
    assert b.gettimeout() == 2.5  # the socket's mode is as it was
    assert b.recv(3) == b"xyz"  # peeked, not consumed
    a.close()
    b.close()


def test_busy_poll_gives_up_after_its_budget_and_reports_a_closed_peer_as_readable():
    a, b = socket.socketpair()
    t0 = time.monotonic()
    assert busy_poll_readable(b, 0.1) is False
    assert 0.1 <= time.monotonic() - t0 < 5.0
    assert b.gettimeout() is None  # blocking again
    a.close()
    assert busy_poll_readable(b, 5.0) is True  # EOF is for the next read to report
    assert b.recv(1) == b""
    b.close()
