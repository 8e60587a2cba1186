"""The weights plane: versioned flat weight buffers over plain TCP, relayed cut-through.

gRPC in Python moves a large message at a fraction of what a socket does here (every
1 MiB chunk is copied into and out of protobuf messages), so weight blobs, the biggest
thing the driver sends, take a plainer road:

- Every process that holds weights (the driver, and each env runner once asked) runs
  a `WeightServer`: a thread per connection, bound to the node's address.
- A request is `MAGIC | token length | token | key`; the token is the cluster token,
  compared in constant time. The reply is `key | nbytes` then the raw float32 bytes:
  nothing is pickled or decoded, the receiver checks the size it expects.
- Blobs are named by a *key* the publisher makes unique and increasing (`new_key`), not
  by the weights version: versions repeat after a restore, and a relay must never hand
  its children an old blob under a reused number.
- A server streams a version *while it is still receiving it* (cut-through): a runner
  pulling from its parent in the broadcast tree gets bytes as soon as the parent has
  them, so a tree of depth d costs about one transfer, not d.
- Every wait has a deadline: the puller's for the whole transfer, the server's for the
  handshake and for each stretch without progress; a broken or stalled transfer raises
  `WeightsPlaneError` and the caller falls back (the driver sends the weights itself).
"""

from __future__ import annotations

import hmac
import logging
import socket
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np

from ftrl.util.tcp import listen, recv_exact, start_accepting
from ftrl.wire.errors import FtrlError

log = logging.getLogger(__name__)

MAGIC = b"FTW1"
_REQUEST = struct.Struct("!4sH")  # magic, token length
_VERSION = struct.Struct("!q")
_REPLY = struct.Struct("!qq")  # version, nbytes (-1: refused)
SLICE = 4 << 20
MAX_TOKEN = 4096
KEEP_VERSIONS = 2
MAX_BYTES = 8 << 30
HANDSHAKE_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64  # concurrent transfers served; more are closed at once


class WeightsPlaneError(FtrlError):
    """A weights transfer failed (refused, broken, or too slow)."""


@dataclass
class _Entry:
    version: int
    buffer: np.ndarray  # float32, flat
    filled: int = 0  # bytes present so far
    failed: bool = False
    owned: bool = True  # our buffer (reused once evicted), not a caller's array
    readers: int = 0  # server threads sending from it
    evicted: bool = False

    @property
    def total(self) -> int:
        return int(self.buffer.nbytes)


class WeightStore:
    """The last few versions this process holds or is receiving. Buffers of evicted
    versions are reused once no transfer reads them (a fresh 200 MB buffer costs ~80 ms
    of page faults here, as much as the copy itself)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._entries: dict[int, _Entry] = {}
        self._free: list[np.ndarray] = []
        self._closed = False

    def close(self) -> None:
        """Wake every waiting transfer: they end at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _add(self, entry: _Entry) -> None:
        with self._cond:
            self._entries[entry.version] = entry
            self._evict(keep=KEEP_VERSIONS)
            self._cond.notify_all()

    def _evict(self, keep: int) -> None:
        for old in sorted(self._entries)[:-keep] if keep else sorted(self._entries):
            evicted = self._entries.pop(old)
            evicted.evicted = True
            self._recycle(evicted)

    def _recycle(self, entry: _Entry) -> None:
        if entry.evicted and entry.owned and entry.readers == 0:
            entry.owned = False  # once
            self._free = [*self._free[-(KEEP_VERSIONS - 1):], entry.buffer]

    def publish(self, version: int, weights: np.ndarray) -> None:
        """Hold a complete version (no copy: the array must not change afterwards)."""
        flat = np.ascontiguousarray(weights, np.float32).reshape(-1)
        self._add(_Entry(version, flat, flat.nbytes, owned=False))

    def receiving(self, version: int, nbytes: int) -> _Entry:
        with self._cond:
            self._evict(keep=KEEP_VERSIONS - 1)  # the oldest goes now: its buffer may be reused
            at = next((i for i, b in enumerate(self._free) if b.nbytes == nbytes), None)
            reuse = self._free.pop(at) if at is not None else None  # by index: == on arrays compares elements
        entry = _Entry(version, reuse if reuse is not None else np.empty(nbytes // 4, np.float32))
        self._add(entry)
        return entry

    def fail(self, version: int) -> None:
        """This process will not have `version` (its own pull failed): peers waiting
        for it from here are told at once instead of at their deadline."""
        with self._cond:
            entry = self._entries.get(version)
            if entry is None:
                entry = _Entry(version, np.empty(0, np.float32), owned=False)
                self._entries[version] = entry
            entry.failed = True
            self._cond.notify_all()

    def reading(self, entry: _Entry, delta: int) -> None:
        with self._cond:
            entry.readers += delta
            self._recycle(entry)

    def progress(self, entry: _Entry, filled: int, failed: bool = False) -> None:
        with self._cond:
            entry.filled = filled
            entry.failed = failed
            self._cond.notify_all()

    def wait_entry(self, version: int, deadline: float) -> _Entry | None:
        with self._cond:
            while version not in self._entries:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed or (self._entries and max(self._entries) > version):
                    return None
                self._cond.wait(remaining)
            return self._entries[version]

    def wait_filled(self, entry: _Entry, beyond: int, deadline: float) -> int:
        """Bytes present once more than `beyond` are (or the entry failed / timed out)."""
        with self._cond:
            while entry.filled <= beyond and not entry.failed:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    break
                self._cond.wait(remaining)
            return entry.filled


class WeightServer:
    """Serves the blobs of a WeightStore to peers that know the cluster token.
    `timeout_s` bounds the wait for a blob to appear and each stretch without progress."""

    def __init__(self, store: WeightStore, host: str, token: str | None, timeout_s: float = 60.0) -> None:
        self.store = store
        self.token = (token or "").encode()
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._sock = listen(host, 1.0)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        start_accepting(self._sock, self._stop, self._slots, self._serve, "ftrl-weights-server")

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                # the whole request within the handshake timeout (an idle peer holds no thread long)
                request_deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
                magic, token_len = _REQUEST.unpack(recv_exact(conn, _REQUEST.size, request_deadline))
                if magic != MAGIC or token_len > MAX_TOKEN:
                    return
                token = recv_exact(conn, token_len, request_deadline)
                (key,) = _VERSION.unpack(recv_exact(conn, _VERSION.size, request_deadline))
                if not hmac.compare_digest(token, self.token):
                    conn.sendall(_REPLY.pack(key, -1))
                    return
                conn.settimeout(self.timeout_s)
                entry = self.store.wait_entry(key, time.monotonic() + self.timeout_s)
                if entry is None or entry.failed:
                    conn.sendall(_REPLY.pack(key, -2))
                    return
                self.store.reading(entry, +1)
                try:
                    self._send(conn, entry)
                finally:
                    self.store.reading(entry, -1)
            except (OSError, struct.error) as e:
                log.debug("weights transfer ended: %s", e)
            finally:
                self._slots.release()

    def _send(self, conn: socket.socket, entry: _Entry) -> None:
        conn.sendall(_REPLY.pack(entry.version, entry.total))
        view = memoryview(entry.buffer).cast("B")
        sent = 0
        while sent < entry.total:
            filled = self.store.wait_filled(entry, sent, time.monotonic() + self.timeout_s)
            if entry.failed or filled <= sent:
                return  # the upstream broke or stalled: the peer sees a short read
            while sent < filled:
                end = min(filled, sent + SLICE)
                conn.sendall(view[sent:end])
                sent = end

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self.store.close()


def fetch(address: str, token: str | None, version: int, store: WeightStore, expect_bytes: int,
          timeout_s: float = 60.0) -> np.ndarray:
    """Pull blob `version` (the publisher's key) from the WeightServer at `address` into
    `store` (served onward to others while it arrives), all within `timeout_s`.
    Returns the flat float32 array."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout_s
    entry = None
    try:
        if not 0 < expect_bytes <= MAX_BYTES or expect_bytes % 4:
            raise WeightsPlaneError(f"bad weights size {expect_bytes}")
        with socket.create_connection((host, int(port)), timeout=min(5.0, timeout_s)) as conn:
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            tok = (token or "").encode()
            conn.sendall(_REQUEST.pack(MAGIC, len(tok)) + tok + _VERSION.pack(version))
            got_version, nbytes = _REPLY.unpack(recv_exact(conn, _REPLY.size))
            if nbytes == -1:
                raise WeightsPlaneError(f"{address} refused the weights request (wrong cluster token)")
            if nbytes == -2:
                raise WeightsPlaneError(f"{address} does not have weights version {version}")
            if got_version != version or nbytes != expect_bytes:
                raise WeightsPlaneError(
                    f"{address} offered version {got_version} of {nbytes} bytes; expected {version} of {expect_bytes}")
            entry = store.receiving(version, nbytes)
            view = memoryview(entry.buffer).cast("B")
            filled = 0
            while filled < nbytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WeightsPlaneError(f"weights transfer from {address} took over {timeout_s:g}s "
                                            f"({filled} of {nbytes} bytes)")
                conn.settimeout(remaining)
                n = conn.recv_into(view[filled:], min(SLICE, nbytes - filled))
                if n == 0:
                    raise WeightsPlaneError(f"{address} closed the transfer at {filled} of {nbytes} bytes")
                filled += n
                store.progress(entry, filled)
            return entry.buffer
    except WeightsPlaneError:
        store.fail(version)
        raise
    except (OSError, struct.error) as e:
        store.fail(version)
        raise WeightsPlaneError(f"weights transfer from {address} failed: {e}") from e


class WeightsNode:
    """A process's place on the weights plane: its store and (lazily) its server."""

    _last_key = 0
    _key_lock = threading.Lock()

    @classmethod
    def new_key(cls) -> int:
        """A blob key never used before by any publisher run on this clock: wall-clock
        nanoseconds, strictly increasing within the process."""
        with cls._key_lock:
            cls._last_key = max(time.time_ns(), cls._last_key + 1)
            return cls._last_key

    def __init__(self, host: str, token: str | None) -> None:
        self.host = host
        self.token = token
        self.store = WeightStore()
        self._server: WeightServer | None = None
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        with self._lock:
            if self._server is None:
                self._server = WeightServer(self.store, self.host, self.token)
            return self._server.address

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
            self.store.close()
