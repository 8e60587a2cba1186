"""Socket helpers shared by ftrl's plain-TCP planes (weights, samples): a server socket on
an ephemeral port, an accept loop that hands each connection to its own daemon thread
(at most as many as `slots` allows; more are closed: callers fall back), exact reads with
a deadline, and scatter/gather sends."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

_IOV_MAX = 1024  # buffers per sendmsg (Linux's IOV_MAX)


def listen(host: str, poll_s: float) -> socket.socket:
    """A server socket on `host`, an ephemeral port, whose accept() wakes every `poll_s`."""
    sock = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.settimeout(poll_s)
    return sock


def start_accepting(sock: socket.socket, stop: threading.Event, slots: threading.BoundedSemaphore,
                    serve: Callable[[socket.socket], None], name: str) -> None:
    """Accept on `sock` in a daemon thread until `stop` is set or the socket closes; each
    connection runs `serve(conn)` in a thread of its own while it holds one of `slots`
    (`serve` releases it when done)."""

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not slots.acquire(blocking=False):
                conn.close()  # too many at once: the caller falls back
                continue
            threading.Thread(target=serve, args=(conn,), name=f"{name}-conn", daemon=True).start()

    threading.Thread(target=accept, name=name, daemon=True).start()


def recv_into_exact(conn: socket.socket, buf: bytearray | memoryview, deadline: float | None = None) -> None:
    """Fill `buf` from `conn` (no copy); TimeoutError past the monotonic `deadline` (None:
    the socket's own timeout), ConnectionError if the peer closes first."""
    view = memoryview(buf).cast("B")
    got, n = 0, len(view)
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the peer was too slow")
            conn.settimeout(remaining)
        k = conn.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k


def recv_exact(conn: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """Exactly `n` bytes from `conn`; TimeoutError past the monotonic `deadline` (None:
    the socket's own timeout), ConnectionError if the peer closes first."""
    buf = bytearray(n)
    recv_into_exact(conn, buf, deadline)
    return bytes(buf)


def recv_body(conn: socket.socket, size: int, deadline: float | None = None, first: int = 1 << 20) -> bytearray:
    """Exactly `size` bytes from `conn` into one bytearray (no copy of small bodies),
    grown as data arrives: at most `first` bytes up front, then doubling, so a header
    that announces a huge body costs nothing until the bytes are really there.
    Errors as `recv_into_exact`."""
    buf = bytearray(min(size, first))
    got = 0
    while True:
        recv_into_exact(conn, memoryview(buf)[got:], deadline)
        got = len(buf)
        if got == size:
            return buf
        buf += bytes(min(got, size - got))


def send_parts(conn: socket.socket, parts: list[bytes | memoryview]) -> None:
    """Send `parts` back to back with scatter/gather writes (no joined copy)."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        sent = conn.sendmsg(views[:_IOV_MAX])
        while sent and views:
            if sent >= len(views[0]):
                sent -= len(views.pop(0))
            else:
                views[0] = views[0][sent:]
                sent = 0


def busy_poll_readable(conn: socket.socket, budget_s: float) -> bool:
    """Spin up to `budget_s` until `conn` has data to read (or its peer closed): True then,
    False when the budget ran out. Each turn yields the CPU, so a spinning thread gives
    way to anything else runnable on its core; it never sleeps, so its CPU is awake when
    the data comes (no wake-up of an idle vCPU). The socket's blocking mode is restored."""
    timeout = conn.gettimeout()
    conn.setblocking(False)
    end = time.perf_counter() + budget_s
    try:
        while True:
            try:
                conn.recv(1, socket.MSG_PEEK)  # b"": the peer closed, which the next read reports
                return True
            except BlockingIOError:
                pass
            if time.perf_counter() >= end:
                return False
            os.sched_yield()
    finally:
        conn.settimeout(timeout)
