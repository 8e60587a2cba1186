"""The sample channel's framing and auth: the right token samples, a wrong one is
refused, an oversize or malformed request is refused, errors map to the RPC path's; the
serving thread busy-polls between quick requests only, within its cap."""

from __future__ import annotations

import concurrent.futures as cf
import select
import socket
import struct
import threading
import time

import numpy as np
import pytest

from ftrl.rl.sampling.sample_plane import (
    _HELLO,
    MAGIC,
    MAX_REQUEST_BYTES,
    REPLY_FRAMING,
    BusyPoll,
    ChannelReply,
    SampleChannel,
    SampleServer,
    wait_first,
)
from ftrl.wire import codec
from ftrl.wire.errors import (
    ActorError,
    ActorUnavailableError,
    FtrlTimeoutError,
    InvalidArgumentError,
    StaleIncarnationError,
    UnauthenticatedError,
)

TOKEN = "s3cret-token"


class FakeRunner:
    """What SampleServer needs of an EnvRunner."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.weights_version = 3
        self.calls = 0
        self.sleep_s = 0.0
        self.started = threading.Event()  # set when a sample() begins

    def sample(self, explore: bool | None = None) -> dict:
        self.calls += 1
        self.started.set()
        if explore is False:
            raise RuntimeError("boom in sample")
        time.sleep(self.sleep_s)
        return {"batch": {"obs": np.arange(12, dtype=np.float32).reshape(3, 4)}, "env_steps": 12,
                "weights_version": self.weights_version}


@pytest.fixture
def server():
    runner = FakeRunner()
    srv = SampleServer(runner, "127.0.0.1", TOKEN, incarnation=7)
    yield srv
    srv.close()


@pytest.fixture
def channel(server):
    ch = SampleChannel(server.address, TOKEN)
    yield ch
    ch.close()


def _connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _until(check, timeout_s: float = 5.0) -> bool:
    """Poll `check` until it holds (True) or `timeout_s` passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _closed_by_peer(sock: socket.socket) -> bool:
    """The server closed the connection (EOF, or a reset when our bytes were unread)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_samples_with_the_right_token(server):
    ch = SampleChannel(server.address, TOKEN, incarnation=7)
    try:
        for _ in range(3):
            out = ch.submit({}, 3, 5.0).result(timeout=5)
            assert out["env_steps"] == 12
            np.testing.assert_array_equal(out["batch"]["obs"], np.arange(12, dtype=np.float32).reshape(3, 4))
        assert server.runner.calls == 3
    finally:
        ch.close()


def test_a_wrong_token_is_refused(server):
    with pytest.raises(UnauthenticatedError):
        SampleChannel(server.address, "wrong", incarnation=7)
    with pytest.raises(UnauthenticatedError):
        SampleChannel(server.address, None)
    assert server.runner.calls == 0


def test_a_raw_client_with_a_wrong_token_gets_no_sample(server):
    with _connect(server.address) as sock:
        tok = b"nope"
        sock.sendall(_HELLO.pack(MAGIC, len(tok)) + tok)
        reply = codec.decode_parts(REPLY_FRAMING.read(sock.recv))
        assert reply["error"]["kind"] == "auth"
        # the server closed: a request after the refusal is never served
        try:
            sock.sendall(struct.pack("!I", 2) + b"xx")
        except OSError:
            pass
        assert _closed_by_peer(sock)
    assert server.runner.calls == 0


def test_bad_magic_or_huge_token_length_closes_at_once(server):
    for hello in (_HELLO.pack(b"XXXX", 3) + b"abc", _HELLO.pack(MAGIC, 65535)):
        with _connect(server.address) as sock:
            sock.sendall(hello)
            assert _closed_by_peer(sock)


def test_an_oversize_request_frame_is_refused(server):
    with _connect(server.address) as sock:
        tok = TOKEN.encode()
        sock.sendall(_HELLO.pack(MAGIC, len(tok)) + tok)
        assert codec.decode_parts(REPLY_FRAMING.read(sock.recv))["ok"] is True
        sock.sendall(struct.pack("!I", MAX_REQUEST_BYTES + 1))  # only the header: refused on it
        assert _closed_by_peer(sock)
    assert server.runner.calls == 0


def test_a_malformed_request_and_an_unknown_method_are_refused(server):
    ch = SampleChannel(server.address, TOKEN)

    def raw_request(frame: bytes) -> ChannelReply:  # what submit() does, with any bytes
        with ch._lock:
            ch._sock.sendall(frame)
            ch._pending = ChannelReply(ch, time.monotonic() + 5, 5)
            return ch._pending

    try:
        with pytest.raises(InvalidArgumentError):
            raw_request(struct.pack("!I", 3) + b"\xc1\xc1\xc1").result(timeout=5)
        payload, _ = codec.encode_parts({"method": "set_weights", "kwargs": {}})
        with pytest.raises(InvalidArgumentError):
            raw_request(struct.pack("!I", sum(len(p) for p in payload)) + b"".join(payload)).result(timeout=5)
        assert server.runner.calls == 0
    finally:
        ch.close()


def test_errors_map_like_the_rpc_path(server):
    ch = SampleChannel(server.address, TOKEN, incarnation=7)
    try:
        with pytest.raises(ActorError) as info:
            ch.submit({"explore": False}, 3, 5.0).result(timeout=5)
        assert "boom in sample" in str(info.value) and "Traceback" in info.value.remote_traceback
        with pytest.raises(StaleIncarnationError):  # another weights version than expected
            ch.submit({}, 4, 5.0).result(timeout=5)
        assert ch.submit({}, 3, 5.0).result(timeout=5)["env_steps"] == 12  # still usable
        server.runner.sleep_s = 1.0
        with pytest.raises(FtrlTimeoutError):
            ch.submit({}, 3, 0.2).result(timeout=5)
        assert ch.closed  # a reply may still come: never reused
        with pytest.raises(ActorUnavailableError):
            ch.submit({}, 3, 5.0)
    finally:
        ch.close()


def test_a_channel_is_for_one_incarnation(server):
    with pytest.raises(StaleIncarnationError):
        SampleChannel(server.address, TOKEN, incarnation=8)


def test_a_closed_server_fails_the_sample_in_flight_and_refuses_new_channels(server):
    ch = SampleChannel(server.address, TOKEN)
    server.runner.sleep_s = 0.5
    fut = ch.submit({}, None, 10.0)
    assert server.runner.started.wait(5.0)  # the server is inside sample()
    server.close()
    with pytest.raises(ActorUnavailableError):
        fut.result(timeout=5)
    with pytest.raises(ActorUnavailableError):
        SampleChannel(server.address, TOKEN, connect_timeout_s=1.0)
    ch.close()


def test_drain_waits_for_the_sample_in_flight(server):
    ch = SampleChannel(server.address, TOKEN)
    server.runner.sleep_s = 0.3
    try:
        fut = ch.submit({}, None, 10.0)
        assert server.runner.started.wait(5.0)  # the server is inside sample()
        assert not server.wait_idle(0.01)
        assert server.wait_idle(5.0)
        assert fut.result(timeout=5)["env_steps"] == 12
    finally:
        ch.close()


def test_a_reply_is_received_by_the_thread_that_asks_and_channels_start_no_threads(server):
    before = set(threading.enumerate())

    def new_threads() -> list[str]:  # by name; threads of earlier tests may end meanwhile
        return sorted(t.name for t in set(threading.enumerate()) - before)

    channels = [SampleChannel(server.address, TOKEN) for _ in range(4)]
    try:
        assert new_threads() == ["ftrl-sample-server-conn"] * 4  # the server's threads, none of ours
        server.runner.sleep_s = 0.3
        reply = channels[0].submit({}, None, 10.0)
        assert new_threads() == ["ftrl-sample-server-conn"] * 4  # no receiver thread either
        t0 = time.monotonic()
        assert not reply.done()  # not here yet: done() does not wait for it
        assert time.monotonic() - t0 < 0.1
        with pytest.raises(cf.TimeoutError):
            reply.result(timeout=0.05)
        assert not reply.cancel()  # like a running call
        assert reply.result(timeout=5)["env_steps"] == 12
        assert reply.done() and reply.exception() is None
        # a reply nobody asked for waits on the socket; the next request's is not mixed up
        server.runner.sleep_s = 0.0
        late = channels[1].submit({}, None, 10.0)
        assert select.select([channels[1].fileno()], [], [], 5)[0]  # it came; nothing received it
        with pytest.raises(RuntimeError):
            channels[1].submit({}, None, 10.0)  # one request in flight per channel
        assert late.done() and late.result()["env_steps"] == 12
        assert channels[1].submit({}, None, 10.0).result(timeout=5)["env_steps"] == 12
        assert server.runner.calls == 3
    finally:
        for ch in channels:
            ch.close()


def test_wait_first_returns_the_first_reply_or_other_future_and_honours_its_timeout(server, channel):
    ch = channel
    server.runner.sleep_s = 0.5
    reply = ch.submit({}, None, 10.0)
    other: cf.Future = cf.Future()
    t0 = time.monotonic()
    assert wait_first([reply, other], 0.1) == set()  # neither: back after the timeout
    assert 0.09 <= time.monotonic() - t0 < 0.4
    threading.Timer(0.1, other.set_result, ("rpc",)).start()
    t0 = time.monotonic()
    assert wait_first([reply, other], 5.0) == {other}  # an RPC future wakes it at once
    assert time.monotonic() - t0 < 0.35
    assert wait_first([reply], 5.0) == {reply}
    assert reply.result(timeout=0)["env_steps"] == 12
    pending: cf.Future = cf.Future()
    threading.Timer(0.1, pending.set_result, (1,)).start()
    assert wait_first([pending], 5.0) == {pending}  # no reply among them: as cf.wait


def test_a_reply_that_came_in_time_counts_when_asked_for_after_its_deadline(channel):
    ch = channel
    reply = ch.submit({}, None, 0.3)
    time.sleep(0.6)  # the driver was busy (training): nobody received it in time
    assert reply.result(timeout=0)["env_steps"] == 12
    assert not ch.closed


def test_a_reply_past_its_deadline_fails_even_when_only_done_is_asked(server, channel):
    ch = channel
    server.runner.sleep_s = 1.0
    reply = ch.submit({}, None, 0.2)
    assert not reply.done()
    time.sleep(0.3)
    assert reply.done()
    with pytest.raises(FtrlTimeoutError):
        reply.result()
    assert ch.closed


def test_a_reply_that_stalls_half_sent_never_blocks_done_or_wait_first(server, monkeypatch):
    import ftrl.rl.sampling.sample_plane as sample_plane

    resume = threading.Event()
    real_send_parts = sample_plane.send_parts

    def stalling_send_parts(conn, parts):  # 10 bytes, then the rest once resumed
        data = b"".join(bytes(p) for p in parts)
        conn.sendall(data[:10])
        resume.wait(10)
        real_send_parts(conn, [data[10:]])

    monkeypatch.setattr(sample_plane, "send_parts", stalling_send_parts)
    ch = SampleChannel(server.address, TOKEN)
    try:
        reply = ch.submit({}, None, 10.0)
        assert select.select([ch.fileno()], [], [], 5)[0]  # the 10 bytes are here
        t0 = time.monotonic()
        assert not reply.done()
        assert wait_first([reply], 0.3) == set()
        assert time.monotonic() - t0 < 0.8
        resume.set()
        assert wait_first([reply], 5.0) == {reply}
        assert reply.result(timeout=0)["env_steps"] == 12
        # one that began and stalls for good fails FRAME_TIMEOUT_S after it began
        monkeypatch.setattr(sample_plane, "FRAME_TIMEOUT_S", 0.5)
        resume.clear()
        reply = ch.submit({}, None, 0.2)
        t0 = time.monotonic()
        with pytest.raises(FtrlTimeoutError):
            reply.result(timeout=5)
        assert 0.4 < time.monotonic() - t0 < 2.0
        assert ch.closed
    finally:
        resume.set()
        ch.close()


def test_huge_timeouts_are_accepted(channel):
    ch = channel
    reply = ch.submit({}, None, 1e12)
    assert wait_first([reply], 1e12) == {reply}
    assert ch.submit({}, None, 1e12).result(timeout=1e12)["env_steps"] == 12


def test_a_done_callback_may_submit_again_and_wait_for_that_reply(server):
    ch = SampleChannel(server.address, TOKEN)
    got = []

    def again(_fut):
        got.append(ch.submit({}, None, 5.0).result(timeout=5)["env_steps"])

    try:
        reply = ch.submit({}, None, 5.0)
        reply.add_done_callback(again)
        assert reply.result(timeout=5)["env_steps"] == 12
        assert got == [12]
    finally:
        ch.close()


def test_wait_first_wakes_when_another_thread_receives_the_reply(server, channel):
    ch = channel
    real_receive = ch._receive_locked

    def slow_receive(reply, wait_s):  # the socket is drained well before the reply is done
        outcome = real_receive(reply, wait_s)
        if outcome is not None:
            time.sleep(0.3)
        return outcome

    ch._receive_locked = slow_receive
    server.runner.sleep_s = 0.4
    reply = ch.submit({}, None, 30.0)
    taker = threading.Thread(target=reply.result, args=(10,))
    taker.start()
    assert _until(ch._recv_lock.locked)  # the other thread holds the receive
    t0 = time.monotonic()
    assert wait_first([reply], 10.0) == {reply}
    assert time.monotonic() - t0 < 1.5
    taker.join(5)
    assert reply.result(timeout=0)["env_steps"] == 12


def test_closing_a_channel_fails_the_reply_a_thread_is_waiting_for(server):
    ch = SampleChannel(server.address, TOKEN)
    server.runner.sleep_s = 2.0
    reply = ch.submit({}, None, 30.0)
    assert server.runner.started.wait(5.0)
    threading.Timer(0.2, ch.close).start()
    t0 = time.monotonic()
    with pytest.raises(ActorUnavailableError):
        reply.result(timeout=10)
    assert time.monotonic() - t0 < 1.5  # not the runner's 2 s, not the 30 s deadline


def test_an_in_process_runner_has_no_channel_and_the_group_samples_by_rpc():
    from ftrl.config import PPOConfig
    from ftrl.rl.sampling.env_runner import EnvRunner
    from ftrl.rl.sampling.runner_channels import channel_token as _channel_token
    from tests.local_client import LocalClient

    cfg = PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=1, rollout_fragment_length=4)
    runner = EnvRunner(cfg)
    try:
        assert runner.sample_address() == {"address": "", "incarnation": 0}
    finally:
        runner.stop()
    with LocalClient() as client:
        assert _channel_token(client) is None


def test_busy_poll_follows_the_recent_waits_within_its_cap():
    poll = BusyPoll(0.01, history=5)
    assert poll.budget() == 0.01  # nothing known yet: the first wait is polled in full
    for _ in range(5):
        poll.record(0.0005)
    assert poll.budget() == pytest.approx(0.002)  # a few times the typical wait
    for _ in range(2):
        poll.record(0.002)
    assert poll.budget() == pytest.approx(0.002)  # the median of the last five is still 0.5 ms
    poll.record(0.002)
    assert poll.budget() == pytest.approx(0.008)  # now 2 ms
    for _ in range(3):
        poll.record(1.0)  # the driver trains between rounds now: the median is past the cap
    assert poll.budget() == 0.0
    for _ in range(3):
        poll.record(0.003)  # quick rounds again: it polls again, capped
    assert poll.budget() == 0.01
    assert BusyPoll(0.0).budget() == 0.0
    never = BusyPoll(0.0)
    never.record(0.0001)
    assert never.budget() == 0.0


def _cpu_while_idle(seconds: float) -> float:
    """CPU seconds this process spends while the test thread sleeps `seconds`."""
    c0 = time.process_time()
    time.sleep(seconds)
    return time.process_time() - c0


def test_the_serving_thread_spins_for_the_next_request_and_stops_after_slow_ones():
    runner = FakeRunner()
    srv = SampleServer(runner, "127.0.0.1", TOKEN, incarnation=7, busy_poll_s=0.4)
    ch = SampleChannel(srv.address, TOKEN, incarnation=7)
    try:
        for _ in range(3):  # requests 0.15 s apart: it polls up to 4 x 0.15 s, capped at 0.4 s
            ch.submit({}, 3, 5.0).result(timeout=5)
            time.sleep(0.15)
        ch.submit({}, 3, 5.0).result(timeout=5)
        assert _cpu_while_idle(0.8) > 0.1  # it spun (up to 0.4 s), then slept
        for _ in range(3):  # waits past the cap
            ch.submit({}, 3, 5.0).result(timeout=5)
            time.sleep(0.5)
        ch.submit({}, 3, 5.0).result(timeout=5)
        assert _cpu_while_idle(0.8) < 0.08  # the median wait is past the cap: no spinning
        assert runner.calls == 8
    finally:
        ch.close()
        srv.close()


def test_no_busy_poll_when_it_is_off(server):
    assert server.busy_poll_s == 0.0
    ch = SampleChannel(server.address, TOKEN, incarnation=7)
    try:
        ch.submit({}, 3, 5.0).result(timeout=5)
        assert _cpu_while_idle(0.6) < 0.08
    finally:
        ch.close()


def test_a_quiet_connection_spins_once_not_after_every_idle_poll(monkeypatch):
    import ftrl.rl.sampling.sample_plane as sp

    monkeypatch.setattr(sp, "POLL_S", 0.2)  # the serving thread's idle reads wake 5x a second
    runner = FakeRunner()
    srv = SampleServer(runner, "127.0.0.1", TOKEN, incarnation=7, busy_poll_s=0.3)
    ch = SampleChannel(srv.address, TOKEN, incarnation=7)
    try:
        for _ in range(3):  # requests 0.1 s apart: it polls up to 0.3 s for the next
            ch.submit({}, 3, 5.0).result(timeout=5)
            time.sleep(0.1)
        ch.submit({}, 3, 5.0).result(timeout=5)
        spent = _cpu_while_idle(2.0)  # ten idle reads; no request comes
        # one spin of <= 0.3 s, not one after each idle read (the spin yields its CPU: on a
        # busy machine it burns less than its 0.3 s, so the floor only shows it spun at all)
        assert 0.02 < spent < 0.6, spent
    finally:
        ch.close()
        srv.close()


# ---- sampling ahead (asynchronous algorithms)

class CountingRunner(FakeRunner):
    """Each fragment says which sample() call made it and with which weights."""

    def sample(self, explore: bool | None = None) -> dict:
        with self._lock:
            self.calls += 1
            if explore is False:
                raise RuntimeError("boom in sample")
            time.sleep(self.sleep_s)
            return {"batch": {"call": np.array([self.calls])}, "env_steps": 1, "weights_version": self.weights_version}


def test_a_prefetch_request_is_answered_with_the_fragment_sampled_ahead():
    runner = CountingRunner()
    srv = SampleServer(runner, "127.0.0.1", TOKEN)
    ch = SampleChannel(srv.address, TOKEN)
    try:
        first = ch.submit({"prefetch": True}, 3, 5.0).result(timeout=5)
        assert int(first["batch"]["call"][0]) == 1
        assert _until(lambda: runner.calls == 2)  # the next one, sampled with no request
        time.sleep(0.3)
        assert runner.calls == 2  # one ahead at most: no request, no more sampling (back-pressure)
        runner.weights_version = 4  # new weights after the fragment ahead was sampled
        second = ch.submit({"prefetch": True}, 4, 5.0).result(timeout=5)
        assert int(second["batch"]["call"][0]) == 2 and second["weights_version"] == 3  # it says its weights
        assert _until(lambda: runner.calls == 3)
        third = ch.submit({"prefetch": True}, 99, 5.0).result(timeout=5)  # no version expected ahead
        assert int(third["batch"]["call"][0]) == 3 and third["weights_version"] == 4
        plain = ch.submit({}, 4, 5.0).result(timeout=5)  # a plain request drops what was ahead
        assert int(plain["batch"]["call"][0]) == 5
        with pytest.raises(StaleIncarnationError):
            ch.submit({}, 3, 5.0).result(timeout=5)  # and plain ones still check the version
    finally:
        ch.close()
        srv.close()


def test_an_error_sampling_ahead_is_the_next_request_s_error():
    runner = CountingRunner()
    srv = SampleServer(runner, "127.0.0.1", TOKEN)
    ch = SampleChannel(srv.address, TOKEN)
    try:
        with pytest.raises(ActorError, match="boom in sample"):
            ch.submit({"prefetch": True, "explore": False}, 3, 5.0).result(timeout=5)  # its own sample raised
        with pytest.raises(ActorError, match="boom in sample"):
            ch.submit({"prefetch": True}, 3, 5.0).result(timeout=5)  # the one sampled ahead raised too
        assert int(ch.submit({"prefetch": True}, 3, 5.0).result(timeout=5)["batch"]["call"][0]) == 3
    finally:
        ch.close()
        srv.close()
