"""Token files, the bind rule, TLS option checks and the token interceptor."""

from __future__ import annotations

import os
import stat

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import ConfigError
from ftrl.wire.security import (
    AUTH_HEADER,
    Security,
    bind,
    check_bind,
    is_loopback,
    read_token_file,
    secure_channel,
    write_token_file,
)
from ftrl.worker.actor_server import ActorServicer, new_actor_server
from tests.actors import Counter


def test_token_file_is_private_and_roundtrips(tmp_path):
    path = tmp_path / "sub" / "token"
    token = write_token_file(path)
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_token_file(str(path)) == token
    assert write_token_file(path, "fixed") == "fixed"
    assert read_token_file(str(path)) == "fixed"
    assert write_token_file(tmp_path / "t2") != token  # random each time


def test_token_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read token file"):
        read_token_file(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    with pytest.raises(ConfigError, match="empty"):
        read_token_file(str(empty))


def test_from_options_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("FTRL_TOKEN", raising=False)
    monkeypatch.delenv("FTRL_TOKEN_FILE", raising=False)
    f = tmp_path / "tok"
    write_token_file(f, "from-file")
    assert Security.from_options().token is None
    assert Security.from_options(token_file=str(f)).token == "from-file"
    monkeypatch.setenv("FTRL_TOKEN", "from-env")
    assert Security.from_options().token == "from-env"
    assert Security.from_options(token_file=str(f)).token == "from-file"
    assert Security.from_options(token="explicit", token_file=str(f)).token == "explicit"
    monkeypatch.delenv("FTRL_TOKEN")
    monkeypatch.setenv("FTRL_TOKEN_FILE", str(f))
    assert Security.from_env().token == "from-file"


def test_tls_option_checks(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="does not exist"):
        Security.from_options(tls_cert=str(tmp_path / "nope.pem"), tls_key=str(cert))
    with pytest.raises(ConfigError, match="together"):
        Security.from_options(tls_cert=str(cert))
    with pytest.raises(ConfigError, match="needs --tls-cert"):
        Security(tls_ca=str(cert)).server_credentials()


def test_metadata_and_child_env():
    sec = Security(token="abc", tls_ca="/ca.pem", insecure=True)
    assert sec.metadata() == ((AUTH_HEADER, "Bearer abc"),)
    assert Security().metadata() == ()
    env = sec.to_env()
    assert env == {"FTRL_TOKEN": "abc", "FTRL_TLS_CA": "/ca.pem", "FTRL_INSECURE": "1"}
    assert sec.with_token("new").token == "new" and sec.token == "abc"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.5.5.5", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("", False), ("10.1.2.3", False), ("::", False), ("no.such.host.invalid", False)],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_check_bind():
    check_bind("127.0.0.1", Security(), "x")
    check_bind("0.0.0.0", Security(token="t"), "x")
    check_bind("0.0.0.0", Security(insecure=True), "x")
    with pytest.raises(ConfigError, match="without a cluster token"):
        check_bind("0.0.0.0", Security(), "the coordinator")
    with pytest.raises(ConfigError, match="--insecure"):
        check_bind("", Security(), "the coordinator")


@pytest.fixture
async def token_server():
    """An actor server (Counter) on loopback that requires the token 'secret'."""
    security = Security(token="secret")
    server = new_actor_server(ActorServicer(Counter(), "c", 3), security, 1 << 20)
    health_servicer = health.aio.HealthServicer()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = bind(server, "127.0.0.1:0", security)
    await server.start()
    channel = secure_channel(f"127.0.0.1:{port}", Security(), [])
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop(0)


async def test_token_interceptor(token_server):
    stub = pb_grpc.ActorStub(token_server)
    reply = await stub.Ping(pb.PingRequest(), metadata=((AUTH_HEADER, "Bearer secret"),), timeout=5)
    assert reply.name == "c" and reply.incarnation == 3 and reply.pid == os.getpid()
    for metadata, reason in (((), "missing cluster token"),
                             (((AUTH_HEADER, "Bearer wrong"),), "wrong cluster token"),
                             (((AUTH_HEADER, "secret"),), "wrong cluster token")):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Ping(pb.PingRequest(), metadata=metadata, timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert reason in info.value.details()
    # streaming methods are guarded too
    call = stub.Call(iter([pb.CallChunk(header=pb.CallHeader(method="get"))]), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in call:
            pass
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # the health check is open
    check = await health_pb2_grpc.HealthStub(token_server).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert check.status == health_pb2.HealthCheckResponse.SERVING


async def test_bind_refuses_a_port_in_use():
    import socket

    from grpc import aio

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        server = aio.server(options=[("grpc.so_reuseport", 0)])
        with pytest.raises(ConfigError, match="cannot listen"):
            bind(server, f"127.0.0.1:{sock.getsockname()[1]}", Security())
    finally:
        sock.close()
