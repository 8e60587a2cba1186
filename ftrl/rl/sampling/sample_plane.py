"""The sample channel: `EnvRunner.sample()` over one persistent, authenticated TCP socket.

A sample through the actor RPC path crosses ~10 thread hand-offs (driver thread, client
event loop, gRPC, the actor's loop, its call thread and back), each paying the wake-up
of an idle vCPU. This channel has two on the critical path: the runner's serving thread
wakes on the request, the driver thread waiting for the round wakes on the reply.

- The runner process runs a `SampleServer` (started on the first `sample_address()`
  call), bound to its node's address like the weights plane. One thread per connection
  (at most `MAX_CONNECTIONS`) reads a request, runs `sample()` under the runner's lock
  (so it never overlaps `set_weights` and the other RPC methods), encodes the result
  with the project codec (msgpack + raw numpy; nothing is pickled) and writes one reply.
- Handshake: `MAGIC | u16 token length | token` within `HANDSHAKE_TIMEOUT_S`; the token
  is the cluster token, compared in constant time. The server answers one frame with
  its incarnation (or a refusal, then closes).
- Frames are `ftrl.util.framing` (u32 big-endian length): requests are capped at
  `MAX_REQUEST_BYTES` (a bigger header is refused before its body is read), replies at
  `MAX_REPLY_BYTES`.
- A request is `{"method": "sample", "kwargs": {...}, "expect_version": v}`: `v` is the
  weights version the driver synced the runner to; a runner holding another version
  answers a stale error instead of sampling (the driver resyncs it).
- Sampling ahead (`"prefetch": true` in kwargs; asynchronous algorithms): after its reply
  the serving thread samples the next fragment at once and answers the next request
  with it, so the runner samples while its fragment travels and the driver turns around
  (with 32-step fragments that was 40% of a runner's time, profiled). No version is
  expected: the fragment says which weights it was sampled with, and weights pushed
  meanwhile wait in the runner's `WeightsInbox` for its next vector step. One fragment
  ahead at most: with no request (the learner's queue full) the runner waits, as before.
  Ahead on the same thread, not a second one: a sampling thread beside the serving one
  made both slower (they contend for the GIL, measured).
- Between requests a serving thread busy-polls (yielding its CPU each turn) for up to
  `busy_poll_s` before it sleeps, but only while recent requests came that fast
  (`BusyPoll`): in back-to-back rounds the next request then finds a thread already
  running instead of waking an idle CPU (on a VM an idle vCPU halts, and waking it is
  slow). With more runners than cores it also shortens the rounds' tail (figures in
  benchmarks/README.md). A runner whose driver trains between rounds stops spinning
  after a few long waits; a thread spins at most once per wait, so an idle connection
  costs nothing.
- The driver's `SampleChannel` belongs to one runner incarnation (a restarted runner
  has a new address and needs a new channel). `submit()` sends from the calling thread
  and returns a `ChannelReply` (a `concurrent.futures.Future`); the thread that waits
  for it receives the reply (`wait_first` for several at once): no receiver thread, so
  a reply costs the driver one wake-up and no hand-off. Errors map to what the RPC path
  raises: a closed/refused/reset connection -> `ActorUnavailableError`, no reply in
  time -> `FtrlTimeoutError` (both close the channel), an exception in `sample()` ->
  `ActorError` with the remote traceback.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import hmac
import logging
import math
import os
import select
import socket
import statistics
import struct
import threading
import time
import traceback
from typing import Any

from ftrl.util.framing import Framing
from ftrl.util.futures import settle
from ftrl.util.tcp import (
    busy_poll_readable,
    listen,
    recv_body,
    recv_exact,
    send_parts,
    start_accepting,
)
from ftrl.wire import codec
from ftrl.wire.errors import (
    ActorError,
    ActorUnavailableError,
    FtrlError,
    FtrlTimeoutError,
    InvalidArgumentError,
    StaleIncarnationError,
    UnauthenticatedError,
)

log = logging.getLogger(__name__)

MAGIC = b"FTS1"
_HELLO = struct.Struct("!4sH")  # magic, token length
MAX_TOKEN = 4096
HANDSHAKE_TIMEOUT_S = 5.0
FRAME_TIMEOUT_S = 30.0  # once a frame has begun, the rest of it must arrive within this
POLL_S = 1.0  # how often an idle serving thread checks for shutdown
MAX_CONNECTIONS = 8
MAX_REQUEST_BYTES = 64 << 10
MAX_REPLY_BYTES = 1 << 30
#: arrays of a reply this big or bigger travel out of band: the runner sends their memory
#: as it is and the driver decodes them as views of the one buffer it received into
REPLY_OOB_MIN_BYTES = 256
METHODS = frozenset({"sample"})
BUSY_POLL_HISTORY = 5  # waits between requests that decide whether to busy-poll for the next

REQUEST_FRAMING = Framing("big", MAX_REQUEST_BYTES, "sample channel request")
REPLY_FRAMING = Framing("big", MAX_REPLY_BYTES, "sample channel reply")


def _parts(obj: Any) -> bytes:
    """`obj` in the codec's call-payload form (`encode_parts`, read with `decode_parts`)."""
    parts, _ = codec.encode_parts(obj)
    return b"".join(parts)


def _error_frame(kind: str, exc: BaseException | None = None, message: str = "") -> list[bytes]:
    """An error reply as the parts of one reply frame."""
    return [REPLY_FRAMING.pack(_error_reply(kind, exc, message))]


def _error_reply(kind: str, exc: BaseException | None = None, message: str = "") -> bytes:
    """An encoded error reply: kind is actor | stale | invalid | auth."""
    if exc is None:
        return _parts({"error": {"kind": kind, "type": "", "message": message, "traceback": ""}})
    cls = type(exc)
    module = cls.__module__
    name = cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"
    tb = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    return _parts({"error": {"kind": kind, "type": name, "message": str(exc)[:10_000],
                                   "traceback": tb[-20_000:]}})


class BusyPoll:
    """How long a serving thread busy-polls for the next request: a small multiple of
    the median of the last few waits between requests, at most `max_s`, and not at all
    while that median is beyond `max_s` (the driver trains between rounds). The first
    wait is polled in full. The caller polls once per wait (an idle connection then
    costs nothing)."""

    def __init__(self, max_s: float, history: int = BUSY_POLL_HISTORY) -> None:
        self.max_s = max(0.0, float(max_s))
        self._waits: collections.deque[float] = collections.deque(maxlen=history)

    def budget(self) -> float:
        """Seconds to busy-poll for the next request (0: sleep at once)."""
        if self.max_s <= 0 or not self._waits:
            return self.max_s
        typical = statistics.median(self._waits)
        return 0.0 if typical > self.max_s else min(self.max_s, 4 * typical)

    def record(self, wait_s: float) -> None:
        """Note how long the thread waited between answering and the next request."""
        self._waits.append(wait_s)


@dataclasses.dataclass(frozen=True)
class Request:
    """A decoded sample request: `sample(**kwargs)`, the weights version the runner must
    hold (None: any), and whether to sample the next fragment ahead after answering."""

    kwargs: dict[str, Any]
    expect_version: int | None
    prefetch: bool


def open_sample_server(runner: Any, busy_poll_s: float) -> SampleServer | None:
    """A sample channel server for `runner` in this actor process, or None where there is
    none: in-process (no runtime context), on a TLS cluster (the channel is plain TCP), or
    with no cluster token on a non-loopback address (nothing to check peers with)."""
    from ftrl.client.context import get_runtime_context
    from ftrl.wire.security import is_loopback

    ctx = get_runtime_context()
    if ctx is None or ctx.security is None or ctx.security.tls:
        return None
    if not ctx.security.token and not is_loopback(ctx.host):
        return None
    return SampleServer(runner, ctx.host, ctx.security.token, ctx.incarnation, busy_poll_s)


class SampleServer:
    """Serves `runner.sample()` to peers that know the cluster token (see module docstring).

    `runner` needs `sample(**kwargs)`, `weights_version` and a `_lock` (an RLock).
    `busy_poll_s` caps the busy-poll between requests (`BusyPoll`; 0: never)."""

    def __init__(self, runner: Any, host: str, token: str | None, incarnation: int = 0,
                 busy_poll_s: float = 0.0) -> None:
        self.runner = runner
        self.busy_poll_s = float(busy_poll_s)
        self.token = (token or "").encode()
        self.incarnation = int(incarnation)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._sock = listen(host, POLL_S)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._busy = 0
        self._cond = threading.Condition()
        start_accepting(self._sock, self._stop, self._slots, self._serve, "ftrl-sample-server")

    def _serve(self, conn: socket.socket) -> None:
        with self._cond:
            self._conns.add(conn)
        try:
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if not self._handshake(conn):
                    return
                poll = BusyPoll(self.busy_poll_s)
                idle_since, polled = time.perf_counter(), False
                ahead: list[bytes | memoryview] | None = None  # the reply sampled ahead
                while not self._stop.is_set():
                    if not polled:  # once per wait, not after every idle timeout
                        polled = True
                        budget = poll.budget()
                        if budget > 0:
                            busy_poll_readable(conn, budget)
                    payload = self._read_request(conn)
                    if payload is None:
                        continue  # idle: poll the stop flag again
                    poll.record(time.perf_counter() - idle_since)
                    request = self._decode(payload)
                    if not isinstance(request, Request):
                        send_parts(conn, request)  # a malformed request's error
                        ahead = None
                    else:
                        send_parts(conn, ahead if request.prefetch and ahead is not None else self._answer(request))
                        # the next fragment, sampled now (once the server stops, no more)
                        ahead = self._answer(request) if request.prefetch and not self._stop.is_set() else None
                    idle_since, polled = time.perf_counter(), False
        except (OSError, EOFError, ValueError, struct.error) as e:
            log.debug("sample channel ended: %s", e)
        finally:
            with self._cond:
                self._conns.discard(conn)
            self._slots.release()

    def _handshake(self, conn: socket.socket) -> bool:
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        magic, token_len = _HELLO.unpack(recv_exact(conn, _HELLO.size, deadline))
        if magic != MAGIC or token_len > MAX_TOKEN:
            return False
        token = recv_exact(conn, token_len, deadline)
        if not hmac.compare_digest(token, self.token):
            conn.sendall(REPLY_FRAMING.pack(_error_reply("auth", message="wrong cluster token")))
            return False
        conn.sendall(REPLY_FRAMING.pack(_parts({"ok": True, "incarnation": self.incarnation, "pid": os.getpid()})))
        return True

    def _read_request(self, conn: socket.socket) -> bytes | None:
        """The next request's payload, or None after POLL_S without one."""
        conn.settimeout(POLL_S)
        try:
            first = conn.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            return None
        if not first:
            raise EOFError("sample channel closed")
        deadline = time.monotonic() + FRAME_TIMEOUT_S
        size = REQUEST_FRAMING.body_size(recv_exact(conn, REQUEST_FRAMING.header.size, deadline))
        payload = recv_exact(conn, size, deadline)
        conn.settimeout(None)  # the reply is sent whole, however long the peer takes to read
        return payload

    def _decode(self, payload: bytes) -> Request | list[bytes | memoryview]:
        """The request in `payload`, or the error reply to a malformed one."""
        try:
            request = codec.decode(payload, codec.SMALL_LIMITS)
            if not isinstance(request, dict) or request.get("method") not in METHODS:
                raise InvalidArgumentError("a sample channel request is {method: 'sample', kwargs, expect_version}")
            kwargs = request.get("kwargs") or {}
            if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
                raise InvalidArgumentError("kwargs must be a map with str keys")
            kwargs = dict(kwargs)
            prefetch = bool(kwargs.pop("prefetch", False))
            expect = request.get("expect_version")
            return Request(kwargs, None if prefetch or expect is None else int(expect), prefetch)
        except (FtrlError, TypeError, ValueError) as e:
            return _error_frame("invalid", e if isinstance(e, FtrlError) else InvalidArgumentError(str(e)))

    def _answer(self, request: Request) -> list[bytes | memoryview]:
        """Sample for one request; its reply frame's parts (encoded on this thread)."""
        with self._cond:
            self._busy += 1
        try:
            runner = self.runner
            with runner._lock:  # as the RPC methods: never beside set_weights & co.
                expect = request.expect_version
                if expect is not None and expect != runner.weights_version:
                    return _error_frame("stale", message=(
                        f"runner holds weights version {runner.weights_version}, the driver expected {expect}"))
                try:
                    result = runner.sample(**request.kwargs)
                except Exception as e:  # user code: the channel stays usable
                    return _error_frame("actor", e)
            try:
                parts, total = codec.encode_parts({"result": result}, REPLY_OOB_MIN_BYTES)
            except Exception as e:
                return _error_frame("actor", e)
            if total > MAX_REPLY_BYTES:
                return _error_frame("actor", message=f"reply of {total} bytes is too large")
            return [REPLY_FRAMING.header.pack(total), *parts]
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is being served (a drain); False after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def close(self) -> None:
        """Stop accepting and end every connection (their peers see a closed channel)."""
        self._stop.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # ends a blocked accept now
        except OSError:
            pass
        self._sock.close()
        with self._cond:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ChannelReply(cf.Future):
    """The reply to one request on a `SampleChannel`, received by the thread that asks for
    it: `done()` takes it if it has come (never blocks), `result()`/`exception()` wait
    for it, `wait_first` waits for the first of several. There is no receiver thread, so
    a reply wakes one driver thread, not a receiver and then the waiter. Like a running
    call it cannot be cancelled. Do not pass it to `concurrent.futures.wait` (nothing
    would receive it): use `wait_first`."""

    def __init__(self, channel: SampleChannel, deadline: float, timeout_s: float) -> None:
        super().__init__()
        self.set_running_or_notify_cancel()
        self.channel = channel
        self.deadline = deadline  # monotonic: no reply by then -> FtrlTimeoutError
        self.timeout_s = timeout_s
        self.begun = False  # some of it came: it has FRAME_TIMEOUT_S more to finish

    def done(self) -> bool:
        if not super().done():
            self.channel._receive(self, 0.0)
        return super().done()

    def result(self, timeout: float | None = None) -> Any:
        self._wait(timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return super().exception(0)

    def _wait(self, timeout: float | None) -> None:
        if not super().done():
            self.channel._receive(self, timeout)
        if not super().done():
            raise cf.TimeoutError()


def wait_first(futures: list[cf.Future], timeout: float | None) -> set[cf.Future]:
    """`concurrent.futures.wait(futures, timeout, FIRST_COMPLETED)`'s done set, for futures
    that may include `ChannelReply`s: this thread receives those replies itself (one
    wake-up each). Empty when `timeout` passed first."""
    replies = [f for f in futures if isinstance(f, ChannelReply)]
    if not replies:
        return cf.wait(futures, timeout, cf.FIRST_COMPLETED)[0]
    others = [f for f in futures if not isinstance(f, ChannelReply)]
    deadline = None if timeout is None else time.monotonic() + timeout
    wake: tuple[socket.socket, socket.socket] | None = None
    woken_by: set[int] = set()  # futures whose completion pokes `wake`
    try:
        while True:
            done = {f for f in futures if f.done()}  # takes the replies that came
            if done:
                return done
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return set()
            # another thread receiving a reply: its completion, not its socket, wakes us
            elsewhere = [r for r in replies if r.channel._recv_lock.locked()]
            if (others or elsewhere) and wake is None:
                wake = socket.socketpair()
            for f in (*others, *elsewhere):
                if id(f) not in woken_by:
                    woken_by.add(id(f))
                    f.add_done_callback(lambda _f, w=wake[1]: _poke(w))  # type: ignore[index]
            poller = select.poll()
            for r in replies:
                fd = r.channel.fileno()
                if fd >= 0 and r not in elsewhere:
                    poller.register(fd, select.POLLIN)
            if wake is not None:
                poller.register(wake[0], select.POLLIN)
            until = min(r.deadline for r in replies)  # a reply past its deadline fails
            if deadline is not None:
                until = min(until, deadline)
            if elsewhere:  # its receiver may give up without finishing it: look again soon
                until = min(until, now + 0.05)
            poller.poll(_poll_ms(until - now))
    finally:
        if wake is not None:
            for sock in wake:
                sock.close()


def _poll_ms(seconds: float) -> int:
    """A `poll()` timeout: milliseconds rounded up, within what poll accepts."""
    return max(0, min(math.ceil(seconds * 1000), 2**31 - 1))


def _poke(sock: socket.socket) -> None:
    try:
        sock.send(b"\0")
    except OSError:  # the wait is over and closed it
        pass


class _FrameReader:
    """One reply frame, read in steps of whatever has come (the socket is non-blocking):
    a receive never waits on a frame that has begun and stalled."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.head = bytearray()
        self.body: bytearray | None = None
        self.got = 0
        self.size = 0

    @property
    def begun(self) -> bool:
        return bool(self.head)

    def feed(self, sock: socket.socket) -> bytearray | None:
        """Read what is there; the payload once the frame is whole, else None. Raises
        EOFError when the peer closed, FrameTooLargeError, OSError."""
        header = REPLY_FRAMING.header.size
        while True:
            try:
                if self.body is None:
                    chunk = sock.recv(header - len(self.head))
                    if not chunk:
                        raise EOFError("sample channel closed")
                    self.head += chunk
                    if len(self.head) < header:
                        continue
                    self.size = REPLY_FRAMING.body_size(bytes(self.head))
                    self.body = bytearray(min(self.size, 1 << 20))  # grown as the bytes come
                    self.got = 0
                elif self.got == len(self.body) < self.size:
                    self.body += bytes(min(len(self.body), self.size - len(self.body)))
                elif self.got < self.size:
                    n = sock.recv_into(memoryview(self.body)[self.got:])
                    if n == 0:
                        raise EOFError("sample channel closed")
                    self.got += n
                if self.body is not None and self.got == self.size:
                    payload = self.body
                    self._reset()
                    return payload
            except BlockingIOError:
                return None


class SampleChannel:
    """The driver's end: one connection to one runner incarnation (module docstring)."""

    def __init__(self, address: str, token: str | None, incarnation: int = 0, connect_timeout_s: float = 5.0) -> None:
        self.address = address
        self.incarnation = int(incarnation)
        self.closed = False
        host, _, port = address.rpartition(":")
        try:
            self._sock = socket.create_connection((host.strip("[]"), int(port)), timeout=connect_timeout_s)
        except (OSError, ValueError) as e:
            raise ActorUnavailableError(f"sample channel {address}: cannot connect: {e}") from e
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tok = (token or "").encode()
            self._sock.sendall(_HELLO.pack(MAGIC, len(tok)) + tok)
            hello = self._read_reply(time.monotonic() + connect_timeout_s)
        except (OSError, EOFError, ValueError) as e:  # reset, closed, timed out, malformed
            self._sock.close()
            raise ActorUnavailableError(f"sample channel {address}: handshake failed: {e}") from e
        except BaseException:
            self._sock.close()
            raise
        if "error" in hello:
            self._sock.close()
            raise _error_of(hello["error"], address)
        if self.incarnation and int(hello.get("incarnation", 0)) != self.incarnation:
            self._sock.close()
            raise StaleIncarnationError(f"sample channel {address} serves incarnation {hello.get('incarnation')}, "
                                        f"not {self.incarnation}")
        self._send_timeout_s = connect_timeout_s
        self._sock.settimeout(0.0)  # replies are read in steps (`_FrameReader`)
        self._reader = _FrameReader()
        self._pending: ChannelReply | None = None
        self._lock = threading.Lock()  # sending, closing
        self._recv_lock = threading.Lock()  # one thread receives at a time

    def fileno(self) -> int:
        """The socket's descriptor (-1 once closed): readable when a reply is coming."""
        return -1 if self.closed else self._sock.fileno()

    def submit(self, kwargs: dict[str, Any] | None, expect_version: int | None, timeout_s: float) -> ChannelReply:
        """Send one sample request now; the `ChannelReply` gets the result or the mapped
        error (`timeout_s` bounds the wait for the reply). Raises ActorUnavailableError
        when the channel is closed or cannot send, RuntimeError when a request is in
        flight."""
        with self._lock:
            if self.closed:
                raise ActorUnavailableError(f"sample channel {self.address} is closed")
            if self._pending is not None:
                raise RuntimeError("a sample request is already in flight on this channel")
            payload = codec.encode({"method": "sample", "kwargs": kwargs or {}, "expect_version": expect_version})
            try:
                self._sock.settimeout(self._send_timeout_s)
                self._sock.sendall(REQUEST_FRAMING.pack(payload))
                self._sock.settimeout(0.0)
            except OSError as e:
                self._close_locked()
                raise ActorUnavailableError(f"sample channel {self.address}: send failed: {e}") from e
            self._pending = ChannelReply(self, time.monotonic() + timeout_s, timeout_s)
            return self._pending

    def _receive(self, reply: ChannelReply, wait_s: float | None) -> None:
        """Take `reply` if it has come within `wait_s` (0: only what is here now; None: up
        to its deadline). It fails with FtrlTimeoutError when its deadline has passed and
        nothing of it has come by the time it is asked for; once begun, it has
        `FRAME_TIMEOUT_S` more to finish (so a reply that came while the driver was busy
        still counts). Completes it outside the locks (its callbacks may submit again)."""
        if not self._recv_lock.acquire(timeout=-1 if wait_s is None else min(wait_s, threading.TIMEOUT_MAX)):
            return  # another thread is receiving it
        try:
            outcome = None if cf.Future.done(reply) else self._receive_locked(reply, wait_s)
        finally:
            self._recv_lock.release()
        if outcome is not None:
            settle(reply, *outcome)  # once: a close may race this receive

    def _receive_locked(self, reply: ChannelReply, wait_s: float | None) -> tuple[Any, FtrlError | None] | None:
        """`_receive`'s work: (result, None), (None, error), or None when not yet."""
        start = time.monotonic()
        while True:
            if self.closed:
                return None, ActorUnavailableError(f"sample channel {self.address} is closed")
            try:
                payload = self._reader.feed(self._sock)
                answer = None if payload is None else codec.decode_parts(payload)
                if payload is not None and not isinstance(answer, dict):
                    raise InvalidArgumentError("malformed sample channel reply")
            except (OSError, EOFError, ValueError, FtrlError) as e:
                if isinstance(e, FtrlError) and not isinstance(e, InvalidArgumentError):
                    return self._failed(e)
                return self._failed(ActorUnavailableError(f"sample channel {self.address} broke: {e}"))
            if payload is not None:
                assert isinstance(answer, dict)
                with self._lock:
                    if self._pending is reply:
                        self._pending = None
                if "error" in answer:
                    return None, _error_of(answer["error"], self.address)
                return answer["result"], None
            now = time.monotonic()
            if self._reader.begun and not reply.begun:
                reply.begun = True
                reply.deadline = max(reply.deadline, now + FRAME_TIMEOUT_S)
            if now >= reply.deadline:
                return self._failed(FtrlTimeoutError(
                    f"sample channel {self.address}: no reply within {reply.timeout_s:g}s"))
            limit = reply.deadline if wait_s is None else min(reply.deadline, start + wait_s)
            if now >= limit:
                return None
            _readable(self._sock, limit - now)

    def _failed(self, error: FtrlError) -> tuple[None, FtrlError]:
        """Close the channel (what follows on it is unknown) for a reply failing with
        `error` (the caller completes it with that error, not "closed")."""
        with self._lock:
            self._close_locked()
        return None, error

    def _read_reply(self, deadline: float) -> dict[str, Any]:
        """One whole frame, waiting up to `deadline` (the handshake's answer)."""
        try:
            size = REPLY_FRAMING.body_size(recv_exact(self._sock, REPLY_FRAMING.header.size, deadline))
            payload = recv_body(self._sock, size, deadline)
        except ConnectionError as e:
            raise EOFError(f"sample channel closed: {e}") from e
        reply = codec.decode_parts(payload)
        if not isinstance(reply, dict):
            raise InvalidArgumentError("malformed sample channel reply")
        return reply

    def _close_locked(self) -> ChannelReply | None:
        if self.closed:
            return None
        self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # ends a receive under way
        except OSError:
            pass
        self._sock.close()
        pending, self._pending = self._pending, None
        return pending

    def close(self) -> None:
        """Close the connection (a reply in flight fails with ActorUnavailableError)."""
        with self._lock:
            pending = self._close_locked()
        if pending is not None:
            settle(pending, error=ActorUnavailableError(f"sample channel {self.address} is closed"))


def _readable(sock: socket.socket, wait_s: float) -> bool:
    """Whether `sock` has data (or its peer closed) within `wait_s` (<= 0: now)."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
    except (OSError, ValueError):  # closed meanwhile: the read that follows reports it
        return True
    return bool(poller.poll(_poll_ms(wait_s)))


def _error_of(error: Any, address: str) -> FtrlError:
    """The FtrlError a reply's error maps to."""
    if not isinstance(error, dict):
        return InvalidArgumentError(f"sample channel {address}: malformed error reply")
    kind = error.get("kind")
    message = str(error.get("message", ""))
    if kind == "actor":
        return ActorError(str(error.get("type") or "Error"), message, str(error.get("traceback", "")))
    if kind == "stale":
        return StaleIncarnationError(f"sample channel {address}: {message}")
    if kind == "auth":
        return UnauthenticatedError(f"sample channel {address}: {message}")
    return InvalidArgumentError(f"sample channel {address}: {error.get('type', '')}: {message}")
