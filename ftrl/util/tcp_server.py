"""The listening half shared by ftrl's plain-TCP planes (weights, samples): a server
socket on an ephemeral port and an accept loop that hands each connection to its own
daemon thread, at most `max_connections` at once (more are closed: callers fall back)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


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
