"""Security on real processes: the cluster token on every method of every server,
token files, the non-loopback bind rule, TLS and mTLS with certificates made here,
and input limits that answer with the right status and name the limit."""

from __future__ import annotations

import json
import stat
import subprocess
import time

import grpc
import numpy as np
import psutil
import pytest
from grpc_health.v1 import health_pb2

import ftrl
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.limits import MAX_CONTROL_MESSAGE
from ftrl.wire.security import Security, write_token_file
from tests import procs
from tests.cluster import FAST, cluster_env, running, wait_until
from tests.netns import Netns, netns_unavailable
from tests.pki import make_pki
from tests.secure_cluster import SecureCluster

TARGET = "tests.security_actors:FuzzTarget"
RELAY = "tests.security_actors:Relay"
BIG = MAX_CONTROL_MESSAGE + (1 << 20)
C = grpc.StatusCode


def _status(fn, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    """The status of a raw call (OK if it succeeded); streams are drained."""
    try:
        result = fn(*args, **kwargs)
        if hasattr(result, "__iter__") and not isinstance(result, bytes):
            for _ in result:
                pass
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return C.OK, ""


def _md(token: str | None) -> tuple:
    return (("authorization", f"Bearer {token}"),) if token is not None else ()


def _channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20),
                                                   ("grpc.max_receive_message_length", 64 << 20)])


# every method of both services, with a harmless request each
COORDINATOR_CALLS = {
    "RegisterNode": ("unary", pb.RegisterNodeRequest(node_id="bad id")),
    "Connect": ("stream", [pb.NodeMessage(node_id="ghost", epoch=1, heartbeat=pb.Heartbeat(seq=1))]),
    "CreateActor": ("unary", pb.CreateActorRequest(spec=pb.ActorSpec(name="x", class_path="bad"))),
    "KillActor": ("unary", pb.KillActorRequest(name="nobody")),
    "GetActor": ("unary", pb.GetActorRequest(name="nobody")),
    "ListActors": ("unary", pb.ListActorsRequest()),
    "ListNodes": ("unary", pb.ListNodesRequest()),
    "WatchEvents": ("server_stream", pb.WatchEventsRequest(prefix="nothing-matches")),
    "GetClusterInfo": ("unary", pb.ClusterInfoRequest()),
}


def _coordinator_call(channel, method: str, md, payload: bytes | None = None, timeout: float = 5):
    kind, request = COORDINATOR_CALLS[method]
    path = f"/ftrl.v1.Coordinator/{method}"
    if kind == "stream":
        data = [payload] if payload is not None else [m.SerializeToString() for m in request]
        return _status(channel.stream_stream(path), iter(data), metadata=md, timeout=timeout)
    data = payload if payload is not None else request.SerializeToString()
    if kind == "server_stream":
        return _status(channel.unary_stream(path), data, metadata=md, timeout=timeout)
    return _status(channel.unary_unary(path), data, metadata=md, timeout=timeout)


def _actor_call(channel, method: str, md, payload: bytes | None = None, timeout: float = 5):
    path = f"/ftrl.v1.Actor/{method}"
    if payload is None:
        parts, total = codec.encode_parts([[7], {}])
        data = b"".join(bytes(p) for p in parts)
        chunk = pb.CallChunk(header=pb.CallHeader(method="echo", total_bytes=total), data=data)
        payload = (pb.PingRequest() if method == "Ping" else chunk).SerializeToString()
    if method == "Call":
        return _status(channel.stream_stream(path), iter([payload]), metadata=md, timeout=timeout)
    return _status(channel.unary_unary(path), payload, metadata=md, timeout=timeout)


def _health(channel, md=()) -> int:
    return channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )(health_pb2.HealthCheckRequest(), metadata=md, timeout=5).status


@pytest.fixture(scope="module")
def target(shared_cluster):
    """A FuzzTarget actor on the shared cluster and raw channels to it and the coordinator."""
    client = shared_cluster.client()
    client.create_actor(TARGET, name="sec-target", get_if_exists=True)
    rec = client.actor("sec-target")
    with _channel(shared_cluster.address) as coordinator, _channel(rec["address"]) as actor:
        yield coordinator, actor, rec


# ---------------------------------------------------------------- authentication


BAD_TOKENS = [
    (None, "missing cluster token"),
    ("", "wrong cluster token"),  # "Bearer " and nothing
    ("wrong", "wrong cluster token"),
]


def _bad_metadata(token: str) -> list[tuple[tuple, str]]:
    """Metadata that must all be refused, with the reason the server must name."""
    cases = [(_md(t), why) for t, why in BAD_TOKENS]
    cases += [
        ((("authorization", token),), "wrong cluster token"),  # no "Bearer "
        ((("authorization", f"bearer {token}"),), "wrong cluster token"),
        (_md(token[:-1]), "wrong cluster token"),  # a prefix of the token
        (_md(token + "x"), "wrong cluster token"),
        ((("x-token", f"Bearer {token}"),), "missing cluster token"),  # wrong header
    ]
    return cases


def test_every_method_of_every_server_requires_the_token(shared_cluster, target):
    coordinator, actor, rec = target
    token = shared_cluster.token
    for md, why in _bad_metadata(token):
        for method in COORDINATOR_CALLS:
            code, details = _coordinator_call(coordinator, method, md)
            assert (code, why in details) == (C.UNAUTHENTICATED, True), (method, md, code, details)
            assert "--token-file" in details  # says how to fix it
        for method in ("Call", "CallUnary", "Ping"):
            code, details = _actor_call(actor, method, md)
            assert (code, why in details) == (C.UNAUTHENTICATED, True), (method, md, code, details)
    # the right token gets through to each method (which then answers on the merits)
    expected = {"RegisterNode": C.INVALID_ARGUMENT, "Connect": C.NOT_FOUND,
                "CreateActor": C.INVALID_ARGUMENT, "KillActor": C.NOT_FOUND, "GetActor": C.NOT_FOUND,
                "ListActors": C.OK, "ListNodes": C.OK, "WatchEvents": C.DEADLINE_EXCEEDED,
                "GetClusterInfo": C.OK}
    for method, want in expected.items():
        code, details = _coordinator_call(coordinator, method, _md(token), timeout=1 if method == "WatchEvents" else 5)
        assert code == want, (method, code, details)
    for method in ("Call", "CallUnary", "Ping"):
        assert _actor_call(actor, method, _md(token)) == (C.OK, ""), method
    # the health check is open (load balancers and probes have no token) ...
    assert _health(coordinator) == health_pb2.HealthCheckResponse.SERVING
    # ... and nothing else is: server reflection would describe the whole API
    reflect = coordinator.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    code, details = _status(reflect, iter([b"\x3a\x00"]), timeout=5)  # list_services
    assert code == C.UNAUTHENTICATED and "missing cluster token" in details
    assert _status(reflect, iter([b"\x3a\x00"]), metadata=_md(token), timeout=5)[0] == C.OK
    # nothing was created or disturbed by the refused calls
    assert _coordinator_call(coordinator, "GetActor", _md(token))[0] == C.NOT_FOUND
    assert psutil.Process(rec["pid"]).is_running()


def test_sdk_and_cli_take_the_token_from_file_or_env(shared_cluster, tmp_path):
    cl = shared_cluster
    with ftrl.Client(cl.address, security=Security()) as c, pytest.raises(
            ftrl.UnauthenticatedError, match="missing cluster token"):
        c.nodes()
    with ftrl.Client(cl.address, token="nope") as c, pytest.raises(
            ftrl.UnauthenticatedError, match="wrong cluster token"):
        c.nodes()
    with ftrl.Client(cl.address, token=cl.token) as c:
        assert len(c.nodes()) == 2

    def status(**env: str) -> subprocess.CompletedProcess:
        return subprocess.run(procs.ftrl("status", "--coordinator", cl.address, "--json"),
                              capture_output=True, text=True, timeout=60, env=procs.env(**env),
                              stdin=subprocess.DEVNULL)

    for env in ({"FTRL_TOKEN": cl.token}, {"FTRL_TOKEN_FILE": str(cl.token_file)}):
        proc = status(**env)
        assert proc.returncode == 0, proc.stderr
        assert {n["node_id"] for n in json.loads(proc.stdout)["nodes"]} == {"local-0", "local-1"}
    proc = status(FTRL_TOKEN="not-it")
    assert proc.returncode == 1 and "wrong cluster token" in proc.stderr
    proc = status()
    assert proc.returncode == 1 and "missing cluster token" in proc.stderr


def test_embedded_cluster_token_is_private_and_never_on_a_command_line(shared_cluster, target):
    cl = shared_cluster
    mode = stat.S_IMODE(cl.token_file.stat().st_mode)
    assert mode == 0o600, oct(mode)
    assert stat.S_IMODE(cl.state_dir.stat().st_mode) & 0o077 == 0  # the state dir too
    assert cl.token_file.read_text().strip() == cl.token and len(cl.token) >= 32
    pids = [cl.coordinator_proc.pid, *(p.pid for p in cl.worker_procs.values()), target[2]["pid"]]
    for pid in pids:
        assert cl.token not in " ".join(psutil.Process(pid).cmdline()), pid


def test_a_token_file_others_can_read_is_warned_about(tmp_path):
    token_file = tmp_path / "token"
    write_token_file(token_file)
    token_file.chmod(0o644)
    log, port_file = tmp_path / "coordinator.log", tmp_path / "port"
    proc = procs.start(procs.ftrl("coordinator", "--port", "0", "--port-file", str(port_file),
                                  "--token-file", str(token_file)), log)
    try:
        procs.wait_port(port_file, proc, log)
        assert "readable by group/others; chmod 600 it" in log.read_text()
    finally:
        procs.stop(proc)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.254.0.1"])
def test_non_loopback_without_a_token_refuses_to_start(tmp_path, host):
    proc = subprocess.run(procs.ftrl("coordinator", "--host", host, "--port", "0"), capture_output=True,
                          text=True, timeout=60, env=procs.env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert f"the coordinator would listen on {host} without a cluster token" in proc.stderr
    assert "--insecure" in proc.stderr and "--token-file" in proc.stderr
    proc = subprocess.run(procs.ftrl("worker", "--coordinator", "127.0.0.1:9", "--address", host,
                                     "--log-dir", str(tmp_path)), capture_output=True, text=True,
                          timeout=60, env=procs.env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert f"this worker's actors would listen on {host} without a cluster token" in proc.stderr


def test_insecure_listens_without_a_token_and_says_so_loudly(tmp_path):
    """--insecure on a non-loopback address: inside a namespace of our own, so the
    token-less port is reachable from nowhere else."""
    reason = netns_unavailable()
    ns = Netns() if reason is None else None
    log, port_file = tmp_path / "coordinator.log", tmp_path / "port"
    argv = procs.ftrl("coordinator", "--host", "0.0.0.0", "--port", "0", "--port-file", str(port_file),
                      "--insecure")
    try:
        proc = procs.start(ns.exec_argv(*argv) if ns else argv, log)
        port = procs.wait_port(port_file, proc, log)
        text = log.read_text()
        assert "WARNING" in text and "INSECURE: the coordinator listens on 0.0.0.0 with no cluster token" in text
        assert "anyone who can reach it can start arbitrary processes" in text
        status = procs.ftrl("status", "--coordinator", f"127.0.0.1:{port}", "--json")
        out = subprocess.run(ns.exec_argv(*status) if ns else status, capture_output=True, text=True,
                             timeout=60, env=procs.env(), stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["nodes"] == []
        procs.stop(proc)
    finally:
        if ns is not None:
            ns.close()


# ---------------------------------------------------------------- TLS and mTLS


def _ping_status(address: str, security: Security) -> tuple[grpc.StatusCode, str]:
    creds = security.channel_credentials()
    with (grpc.secure_channel(address, creds) if creds else grpc.insecure_channel(address)) as ch:
        return _status(pb_grpc.ActorStub(ch).Ping, pb.PingRequest(), metadata=security.metadata(), timeout=5)


def _nodes_status(address: str, security: Security) -> tuple[type[Exception] | None, str]:
    client = ftrl.Client(address, security=security, timeout=5)
    try:
        client.nodes()
        return None, ""
    except ftrl.FtrlError as e:
        return type(e), str(e)
    finally:
        client.close()


def test_mtls_cluster_serves_clients_with_cluster_certs_only(tmp_path):
    pki = make_pki(tmp_path / "pki")
    cluster = SecureCluster.mtls(pki, 1, 3, env=cluster_env(), **FAST)
    with cluster as cl:
        c = cl.client()
        target = c.create_actor(TARGET, name="tls-target")
        assert target.call("echo", {"over": "mtls"}) == {"over": "mtls"}
        arr = np.arange(200_000, dtype=np.float32)  # out-of-band payload, several chunks
        assert target.call("total", arr) == float(arr.astype(np.float64).sum())
        # an actor calls another actor with the credentials its worker handed it
        relay = c.create_actor(RELAY, name="tls-relay")
        assert relay.call("connect", "tls-target") == c.actor("tls-target")["address"]
        assert relay.call("call_peer", "add", 20, 22) == {"ok": True, "result": 42}
        good = cl.security
        actor_address = c.actor("tls-target")["address"]
        assert _ping_status(actor_address, good)[0] == C.OK

        refused = {
            "plaintext": Security(token=cl.token),
            "TLS without a client certificate": Security(token=cl.token, tls_ca=pki.ca),
            "client certificate of another CA": Security(
                token=cl.token, tls_ca=pki.ca, tls_cert=pki.other_client_cert, tls_key=pki.other_client_key),
            "server not verified (another CA)": Security(
                token=cl.token, tls_ca=pki.other_ca, tls_cert=pki.client_cert, tls_key=pki.client_key),
        }
        for what, sec in refused.items():
            err, text = _nodes_status(cl.address, sec)
            assert err is ftrl.ActorUnavailableError, (what, err, text)
            code, details = _ping_status(actor_address, sec)
            assert code == C.UNAVAILABLE, (what, code, details)
        err, text = _nodes_status(cl.address, refused["server not verified (another CA)"])
        assert "CERTIFICATE_VERIFY_FAILED" in text
        # TLS does not replace the token: a cluster certificate with a wrong token is refused
        wrong_token = Security(token="nope", tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)
        err, text = _nodes_status(cl.address, wrong_token)
        assert err is ftrl.UnauthenticatedError and "wrong cluster token" in text
        assert _ping_status(actor_address, wrong_token)[0] == C.UNAUTHENTICATED
        # after all that, everything still serves
        assert target.call("count") == 3  # echo, total, and add from the relay
        assert {n["node_id"]: n["connected"] for n in c.nodes()} == {"local-0": True}
        assert running(cl.coordinator_proc) and all(running(p) for p in cl.worker_procs.values())


def test_server_tls_without_client_certificates(tmp_path):
    """TLS one way: servers prove who they are, clients need only the CA (and the token).

    Workers also dial as clients and verify the coordinator with --tls-ca;
    --tls-no-client-auth keeps the servers from demanding client certificates."""
    pki = make_pki(tmp_path / "pki")
    cluster = SecureCluster(1, 2, server_flags=["--tls-cert", pki.node_cert, "--tls-key", pki.node_key,
                                                "--tls-ca", pki.ca, "--tls-no-client-auth"],
                            client_security=Security(tls_ca=pki.ca), env=cluster_env(), **FAST)
    with cluster as cl:
        c = cl.client()
        target = c.create_actor(TARGET, name="tls1-target")
        assert target.call("add", 1, 2) == 3
        assert _ping_status(c.actor("tls1-target")["address"], cl.security)[0] == C.OK
        for sec in (Security(token=cl.token), Security(token=cl.token, tls_ca=pki.other_ca)):
            err, _ = _nodes_status(cl.address, sec)
            assert err is ftrl.ActorUnavailableError
            assert _ping_status(c.actor("tls1-target")["address"], sec)[0] == C.UNAVAILABLE


def test_tls_options_are_checked_at_startup(tmp_path):
    pki = make_pki(tmp_path / "pki")
    cases = [
        (["--tls-cert", pki.node_cert], "--tls-cert and --tls-key must be given together"),
        (["--tls-cert", str(tmp_path / "nope.pem"), "--tls-key", pki.node_key], "does not exist"),
        (["--tls-ca", pki.ca], "a server needs --tls-cert and --tls-key"),
    ]
    for flags, words in cases:
        proc = subprocess.run(procs.ftrl("coordinator", "--port", "0", *flags), capture_output=True,
                              text=True, timeout=60, env=procs.env(), stdin=subprocess.DEVNULL)
        assert proc.returncode != 0 and words in proc.stderr, (flags, proc.stderr[-500:])


# ---------------------------------------------------------------- input limits


def test_oversized_messages_are_refused_naming_the_limit(shared_cluster, target):
    coordinator, actor, rec = target
    md = _md(shared_cluster.token)
    junk = b"\x00" * BIG
    for method in COORDINATOR_CALLS:
        code, details = _coordinator_call(coordinator, method, md, payload=junk, timeout=20)
        assert code == C.RESOURCE_EXHAUSTED, (method, code, details)
        assert str(MAX_CONTROL_MESSAGE) in details, details
    for method in ("Call", "CallUnary", "Ping"):
        code, details = _actor_call(actor, method, md, payload=junk, timeout=20)
        assert code == C.RESOURCE_EXHAUSTED and "larger than max" in details, (method, code, details)
    # a streamed call may carry more than one message's worth, chunk by chunk ...
    blob = np.ones(3 << 20, dtype=np.uint8)
    client = shared_cluster.client()
    assert client.get_actor("sec-target").call("total", blob) == float(blob.size)
    assert psutil.Process(rec["pid"]).is_running()
    assert _health(coordinator) == health_pb2.HealthCheckResponse.SERVING


def test_names_and_counts_over_their_limits(shared_cluster, target):
    coordinator, actor, _ = target
    md = _md(shared_cluster.token)
    stub = pb_grpc.CoordinatorStub(coordinator)
    long = "n" * 201
    many = {f"k{i}": 1.0 for i in range(33)}
    cases = [
        (stub.CreateActor, pb.CreateActorRequest(spec=pb.ActorSpec(name=long, class_path=TARGET)),
         C.INVALID_ARGUMENT, "actor name is 201 characters; the limit is 200"),
        (stub.CreateActor, pb.CreateActorRequest(spec=pb.ActorSpec(name="x", class_path="m:" + "C" * 199)),
         C.INVALID_ARGUMENT, "class path is 201 characters; the limit is 200"),
        (stub.CreateActor, pb.CreateActorRequest(spec=pb.ActorSpec(name="x", class_path=TARGET, resources=many)),
         C.INVALID_ARGUMENT, "actor resources has 33 keys; the limit is 32"),
        (stub.CreateActor, pb.CreateActorRequest(spec=pb.ActorSpec(
            name="x", class_path=TARGET, kwargs=codec.encode({"b": b"x" * (1 << 20)}))),
         C.RESOURCE_EXHAUSTED, "the limit is 1048576"),
        (stub.CreateActor, pb.CreateActorRequest(spec=pb.ActorSpec(
            name="x", class_path=TARGET, env=codec.encode({"A=B": "1"}))),
         C.INVALID_ARGUMENT, "actor env variable 'A=B' is not valid"),
        (stub.CreateActor, pb.CreateActorRequest(spec=pb.ActorSpec(name="x", class_path=TARGET,
                                                                   max_concurrency=5000)),
         C.INVALID_ARGUMENT, "max_concurrency must be 0..1024"),
        (stub.GetActor, pb.GetActorRequest(name=long), C.INVALID_ARGUMENT, "the limit is 200"),
        (stub.KillActor, pb.KillActorRequest(name=long), C.INVALID_ARGUMENT, "the limit is 200"),
        (stub.GetActor, pb.GetActorRequest(name="x", wait_s=1e9), C.INVALID_ARGUMENT, "wait_s must be in [0, 300]"),
        (stub.RegisterNode, pb.RegisterNodeRequest(node_id=long, session_id="s", address="a"),
         C.INVALID_ARGUMENT, "node id is 201 characters; the limit is 200"),
        (stub.RegisterNode, pb.RegisterNodeRequest(node_id="n", session_id="s", address="a", resources=many),
         C.INVALID_ARGUMENT, "node resources has 33 keys; the limit is 32"),
        (stub.RegisterNode, pb.RegisterNodeRequest(node_id="n", session_id="s" * 129, address="a"),
         C.INVALID_ARGUMENT, "session id must be 1..128 characters"),
    ]
    for fn, request, want, words in cases:
        code, details = _status(fn, request, metadata=md, timeout=10)
        assert (code, words in details) == (want, True), (words, code, details)
    parts, total = codec.encode_parts([[], {}])
    data = b"".join(bytes(p) for p in parts)
    for method in ("x" * 201, "_private"):
        chunk = pb.CallChunk(header=pb.CallHeader(method=method, total_bytes=total), data=data)
        code, details = _actor_call(actor, "CallUnary", md, payload=chunk.SerializeToString())
        assert code == C.INVALID_ARGUMENT, (code, details)
    assert "the limit is 200" in _actor_call(actor, "CallUnary", md, payload=pb.CallChunk(
        header=pb.CallHeader(method="x" * 201, total_bytes=total), data=data).SerializeToString())[1]
    # nothing of that was created
    names = {a["name"] for a in shared_cluster.client().actors()}
    assert "x" not in names and long not in names
    assert {n["node_id"] for n in shared_cluster.client().nodes()} == {"local-0", "local-1"}


def test_create_actor_rate_limit_per_peer(tmp_path):
    token_file = tmp_path / "token"
    token = write_token_file(token_file)
    log, port_file = tmp_path / "coordinator.log", tmp_path / "port"
    proc = procs.start(procs.ftrl("coordinator", "--port", "0", "--port-file", str(port_file),
                                  "--token-file", str(token_file), "--create-rate", "1",
                                  "--create-burst", "5"), log)
    try:
        port = procs.wait_port(port_file, proc, log)
        md = _md(token)
        with _channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            bad = pb.CreateActorRequest(spec=pb.ActorSpec(name="r", class_path="not-a-path"))

            def burst(n: int) -> tuple[list[tuple[grpc.StatusCode, str]], float]:
                t0 = time.monotonic()
                out = [_status(stub.CreateActor, bad, metadata=md, timeout=5) for _ in range(n)]
                return out, time.monotonic() - t0

            # invalid requests count too: the limit guards the work of checking them
            answers, took = burst(40)
            refused = [details for code, details in answers if code == C.RESOURCE_EXHAUSTED]
            assert [code for code, _ in answers[:5]] == [C.INVALID_ARGUMENT] * 5
            assert len(refused) >= 40 - 5 - int(took) - 1, (len(refused), took)  # burst + 1/s
            assert refused[0] == "rate limit for CreateActor: at most 1/s per peer (burst 5); retry later"
            # other methods are not limited
            assert _status(stub.ListActors, pb.ListActorsRequest(), metadata=md, timeout=5)[0] == C.OK
            time.sleep(1.2)  # refills at least one token
            ok = pb.CreateActorRequest(spec=pb.ActorSpec(name="fine", class_path=TARGET))
            assert _status(stub.CreateActor, ok, metadata=md, timeout=5) == (C.OK, "")
    finally:
        procs.stop(proc)
    assert "Traceback" not in log.read_text()


def test_standalone_loopback_coordinator_makes_a_token_only_its_user_finds(tmp_path):
    """No token given on loopback: the coordinator makes one in a 0600 file under
    FTRL_HOME; this user's workers, SDK and CLI find it; anyone else is refused; a
    restarted coordinator keeps it, so its workers stay."""
    home = tmp_path / "home"
    environ = procs.env(FTRL_HOME=str(home))
    port_file = tmp_path / "port"
    coordinator = procs.start(procs.ftrl("coordinator", "--port", "0", "--port-file", str(port_file)),
                              tmp_path / "coordinator.log", environ)
    worker = None
    try:
        port = procs.wait_port(port_file, coordinator, tmp_path / "coordinator.log")
        token_file = home / "tokens" / f"loopback-{port}.token"
        assert token_file.is_file() and (token_file.stat().st_mode & 0o777) == 0o600
        address = f"127.0.0.1:{port}"
        with _channel(address) as channel:  # no token: refused
            code, details = _coordinator_call(channel, "ListNodes", ())
        assert code == C.UNAUTHENTICATED and "missing cluster token" in details
        worker = procs.start(procs.ftrl("worker", "--coordinator", address, "--node-id", "w1"),
                             tmp_path / "worker.log", environ)
        status = subprocess.run(procs.ftrl("status", "--coordinator", address, "--json"),
                                env=environ, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        with ftrl.Client(address, security=Security(token=token_file.read_text().strip())) as c:
            wait_until(lambda: [n["state"] for n in c.nodes()] == ["ALIVE"], 60, what="the worker to join")
        other = procs.env(FTRL_HOME=str(tmp_path / "someone-else"))  # no token to find
        refused = subprocess.run(procs.ftrl("status", "--coordinator", address), env=other,
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "cluster token" in refused.stderr
        # restart on the same port: the same token, and the worker reconnects on its own
        token = token_file.read_text()
        procs.stop(coordinator)
        coordinator = procs.start(procs.ftrl("coordinator", "--port", str(port)),
                                  tmp_path / "coordinator2.log", environ)
        with ftrl.Client(address, security=Security(token=token.strip())) as c:
            wait_until(lambda: [(n["node_id"], n["connected"]) for n in c.nodes()] == [("w1", True)],
                       60, what="the worker to reconnect")
        assert token_file.read_text() == token and worker.poll() is None
    finally:
        procs.stop(worker, coordinator)
