"""Bad and hostile input: each gets the right gRPC status and a message naming the
problem, and the coordinator, the workers and the actors keep running."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

import ftrl
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.limits import MAX_CALL_BYTES
from tests.cluster import cluster_env, running

BIG = 5 << 20  # over every 4 MiB message cap


@pytest.fixture
def healthy(shared_cluster, client):
    """Asserts after the test that every process is up and nothing was lost."""
    nodes_before = {n["node_id"]: (n["pid"], n["epoch"]) for n in client.nodes()}
    yield
    assert running(shared_cluster.coordinator_proc)
    assert all(running(p) for p in shared_cluster.worker_procs.values())
    nodes_after = {n["node_id"]: (n["pid"], n["epoch"]) for n in client.nodes()}
    assert nodes_after == nodes_before  # no worker re-registered or was replaced
    assert all(n["state"] == "ALIVE" and n["connected"] for n in client.nodes())


def _channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20),
                                                   ("grpc.max_receive_message_length", 64 << 20)])


def _md(cluster) -> tuple:
    return (("authorization", f"Bearer {cluster.token}"),)


def _status(fn, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        result = fn(*args, **kwargs)
        if hasattr(result, "__iter__") and not isinstance(result, (bytes, pb.CallChunk)):
            list(result)
    return info.value.code(), info.value.details()


# ---------------------------------------------------------------- class paths and constructors


@pytest.mark.parametrize(
    ("class_path", "remote_type", "words"),
    [
        ("tests.no_such_module:Thing", "ImportError", ["tests.no_such_module"]),
        ("tests.actors:NoSuchClass", "ImportError", ["tests.actors", "NoSuchClass"]),
        ("tests.actors:not_a_class", "TypeError", ["not_a_class", "not a class"]),
        ("tests.actors:BadInit", "RuntimeError", ["BadInit refuses to start"]),
    ],
)
def test_class_that_cannot_start(client, healthy, class_path, remote_type, words):
    name = "bad-" + class_path.rpartition(":")[2].lower()
    with pytest.raises(ftrl.ActorStartError) as info:
        client.create_actor(class_path, name=name, max_restarts=-1, timeout=60)
    err = info.value
    assert err.remote_type == remote_type
    for word in words:
        assert word in str(err)
    rec = client.actor(name)
    assert rec["state"] == "DEAD" and rec["error_type"] == remote_type
    assert rec["restarts"] == 0  # a broken class is not retried
    assert all(name not in n["actors"] for n in client.nodes())
    client.create_actor("tests.actors:Counter", name=name + "-ok").call("incr")
    client.kill_actor(name + "-ok")


def test_constructor_kwargs_that_do_not_fit(client, healthy):
    with pytest.raises(ftrl.ActorStartError, match="unexpected keyword argument 'nope'"):
        client.create_actor("tests.actors:Counter", name="bad-kwargs", kwargs={"nope": 1})


@pytest.mark.parametrize("class_path", ["no_colon", "pkg.mod:", "a b:C", "os:system; rm"])
def test_malformed_class_path(client, healthy, class_path):
    with pytest.raises(ftrl.InvalidArgumentError, match=r"package\.module:Class"):
        client.create_actor(class_path, name="malformed-path")
    with pytest.raises(ftrl.NotFoundError):
        client.actor("malformed-path")


def test_kwargs_that_are_not_msgpackable(client, healthy):
    with pytest.raises(ftrl.InvalidArgumentError, match="actor kwargs is not msgpack-able"):
        client.create_actor("tests.actors:Counter", name="unpackable", kwargs={"x": object()})
    with pytest.raises(ftrl.NotFoundError):
        client.actor("unpackable")


def test_bad_names_and_options(client, healthy):
    with pytest.raises(ftrl.InvalidArgumentError, match="actor name"):
        client.create_actor("tests.actors:Counter", name="has spaces")
    with pytest.raises(ftrl.InvalidArgumentError, match="max_restarts"):
        client.create_actor("tests.actors:Counter", name="x", max_restarts=-5)
    with pytest.raises(ftrl.InvalidArgumentError, match="finite"):
        client.create_actor("tests.actors:Counter", name="x", resources={"cpu": float("inf")})
    with pytest.raises(ftrl.NotFoundError):
        client.actor("x")


def test_duplicate_actor_name(client, healthy, actors):
    h = actors("dup", kwargs={"start": 1})
    pid = client.actor("dup")["pid"]
    with pytest.raises(ftrl.AlreadyExistsError, match="'dup'"):
        client.create_actor("tests.actors:Counter", name="dup", kwargs={"start": 99})
    same = client.create_actor("tests.actors:Counter", name="dup", get_if_exists=True)
    assert same.incarnation == h.incarnation
    assert same.call("get") == 1 and client.actor("dup")["pid"] == pid


def test_oversized_kwargs(client, healthy):
    with pytest.raises(ftrl.ResourceExhaustedError, match="kwargs"):
        client.create_actor("tests.actors:Counter", name="fat", kwargs={"blob": b"x" * (2 << 20)})
    with pytest.raises(ftrl.ResourceExhaustedError):
        client.create_actor("tests.actors:Counter", name="fat", kwargs={"blob": b"x" * BIG})
    with pytest.raises(ftrl.NotFoundError):
        client.actor("fat")


# ---------------------------------------------------------------- calls


def test_unknown_and_private_methods(client, healthy, actors):
    h = actors("methods")
    pid = h.call("pid")
    with pytest.raises(ftrl.MethodNotFoundError, match="no method 'nope'"):
        h.call("nope")
    with pytest.raises(ftrl.InvalidArgumentError, match="private"):
        h.call("_secret")
    with pytest.raises(ftrl.InvalidArgumentError, match="not msgpack-able"):
        h.call("echo", object())
    assert h.call("incr") == 1
    assert client.actor("methods")["pid"] == pid


def _payload(obj) -> bytes:
    """A call payload as the SDK sends it."""
    parts, total = codec.encode_parts(obj)
    data = b"".join(bytes(p) for p in parts)
    assert len(data) == total
    return data


def test_raw_calls_with_bad_payloads(shared_cluster, client, healthy, actors):
    h = actors("target", kwargs={"start": 7})
    rec = client.actor("target")
    md = _md(shared_cluster)
    with _channel(rec["address"]) as channel:
        stub = pb_grpc.ActorStub(channel)

        def call(*chunks, metadata=md):
            return _status(stub.Call, iter(chunks), metadata=metadata, timeout=10)

        def unary(chunk, metadata=md):
            return _status(stub.CallUnary, chunk, metadata=metadata, timeout=10)

        def header(method="incr", total=0, incarnation=0):
            return pb.CallHeader(method=method, total_bytes=total, incarnation=incarnation)

        garbage = b"\xc1\xff\x00garbage"
        not_a_call = _payload(7)
        short = _payload([[], {}])
        cases = []
        for send in (call, unary):
            cases += [
                (send(pb.CallChunk(header=header(total=len(garbage)), data=garbage)),
                 grpc.StatusCode.INVALID_ARGUMENT, "malformed payload"),
                (send(pb.CallChunk(header=header(total=len(b"\x01")), data=b"\x01")),
                 grpc.StatusCode.INVALID_ARGUMENT, "malformed payload"),
                (send(pb.CallChunk(header=header(total=len(not_a_call)), data=not_a_call)),
                 grpc.StatusCode.INVALID_ARGUMENT, "[args list, kwargs map"),
                (send(pb.CallChunk(header=header(total=100), data=short)),
                 grpc.StatusCode.INVALID_ARGUMENT, "100"),
                (send(pb.CallChunk(data=b"no header")),
                 grpc.StatusCode.INVALID_ARGUMENT, "header"),
                (send(pb.CallChunk(header=header(method="__init__"))),
                 grpc.StatusCode.INVALID_ARGUMENT, "private"),
                (send(pb.CallChunk(header=header(method="nope"))),
                 grpc.StatusCode.UNIMPLEMENTED, "no method 'nope'"),
                (send(pb.CallChunk(header=header(incarnation=rec["incarnation"] + 5))),
                 grpc.StatusCode.FAILED_PRECONDITION, "stale incarnation"),
                (send(pb.CallChunk(header=header(total=MAX_CALL_BYTES + 1))),
                 grpc.StatusCode.RESOURCE_EXHAUSTED, "exceeds the limit"),
                (send(pb.CallChunk(header=header(total=BIG), data=b"\x00" * BIG)),
                 grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
                (send(pb.CallChunk(header=header()), metadata=()),
                 grpc.StatusCode.UNAUTHENTICATED, "missing cluster token"),
                (send(pb.CallChunk(header=header()), metadata=(("authorization", "Bearer wrong"),)),
                 grpc.StatusCode.UNAUTHENTICATED, "wrong cluster token"),
            ]
        for (code, details), want_code, want_text in cases:
            assert code == want_code, (want_text, code, details)
            assert want_text in details, (want_code, details)

        # bytes that are not a protobuf message at all
        for method, streaming in (("Call", True), ("CallUnary", False), ("Ping", False)):
            if streaming:
                raw = channel.stream_stream(f"/ftrl.v1.Actor/{method}")
                code, details = _status(raw, iter([b"\xff\xff\xff\xffnot protobuf"]), metadata=md, timeout=10)
            else:
                raw = channel.unary_unary(f"/ftrl.v1.Actor/{method}")
                code, details = _status(raw, b"\xff\xff\xff\xffnot protobuf", metadata=md, timeout=10)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, code, details)
            assert f"malformed Actor.{method} request" in details

        # a well-formed raw call still works, on the same connection
        payload = _payload([[2], {}])
        chunks = list(stub.Call(iter([pb.CallChunk(header=header(total=len(payload)), data=payload)]),
                                metadata=md, timeout=10))
        assert codec.decode_parts(b"".join(c.data for c in chunks)) == 9
    after = client.actor("target")
    assert (after["pid"], after["incarnation"], after["state"]) == (rec["pid"], rec["incarnation"], "ALIVE")
    assert h.call("get") == 9


def test_raw_coordinator_requests(shared_cluster, client, healthy):
    md = _md(shared_cluster)
    with _channel(shared_cluster.address) as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        spec = pb.ActorSpec(name="raw", class_path="tests.actors:Counter")

        for method in ("CreateActor", "GetActor", "KillActor", "ListActors", "RegisterNode"):
            raw = channel.unary_unary(f"/ftrl.v1.Coordinator/{method}")
            code, details = _status(raw, b"\xff\xff\xff\xffnot protobuf", metadata=md, timeout=10)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, code, details)
            assert f"malformed Coordinator.{method} request" in details
        for method in ("Connect",):
            raw = channel.stream_stream(f"/ftrl.v1.Coordinator/{method}")
            code, details = _status(raw, iter([b"\xff\xffjunk"]), metadata=md, timeout=10)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in details
        raw = channel.unary_stream("/ftrl.v1.Coordinator/WatchEvents")
        code, details = _status(raw, b"\xff\xffjunk", metadata=md, timeout=10)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in details

        bad_kwargs = pb.ActorSpec(name="raw", class_path="tests.actors:Counter", kwargs=b"\xc1junk")
        code, details = _status(stub.CreateActor, pb.CreateActorRequest(spec=bad_kwargs), metadata=md, timeout=10)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in details
        not_a_map = pb.ActorSpec(name="raw", class_path="tests.actors:Counter", kwargs=codec.encode([1]))
        code, details = _status(stub.CreateActor, pb.CreateActorRequest(spec=not_a_map), metadata=md, timeout=10)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "msgpack map" in details
        huge = pb.ActorSpec(name="raw", class_path="tests.actors:Counter", kwargs=b"\x00" * BIG)
        code, details = _status(stub.CreateActor, pb.CreateActorRequest(spec=huge), metadata=md, timeout=10)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
        code, _ = _status(stub.CreateActor, pb.CreateActorRequest(spec=spec), timeout=10)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        code, details = _status(stub.GetActor, pb.GetActorRequest(name="raw", wait_s=-1), metadata=md, timeout=10)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "wait_s" in details
        code, details = _status(stub.GetActor, pb.GetActorRequest(name="nobody"), metadata=md, timeout=10)
        assert code == grpc.StatusCode.NOT_FOUND and "'nobody'" in details
        code, details = _status(stub.RegisterNode, pb.RegisterNodeRequest(node_id="bad id"), metadata=md, timeout=10)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "node id" in details
        hello = pb.NodeMessage(node_id="ghost-node", epoch=1, heartbeat=pb.Heartbeat(seq=1))
        code, details = _status(stub.Connect, iter([hello]), metadata=md, timeout=10)
        assert code == grpc.StatusCode.NOT_FOUND and "ghost-node" in details
    with pytest.raises(ftrl.NotFoundError):
        client.actor("raw")
    assert sorted(n["node_id"] for n in client.nodes()) == ["local-0", "local-1"]


def test_wrong_token(shared_cluster):
    bad = ftrl.Client(shared_cluster.address, token="not-the-token")
    try:
        with pytest.raises(ftrl.UnauthenticatedError, match="wrong cluster token"):
            bad.nodes()
        with pytest.raises(ftrl.UnauthenticatedError):
            bad.create_actor("tests.actors:Counter", name="sneaky")
    finally:
        bad.close()


# ---------------------------------------------------------------- duplicate worker


def test_second_worker_with_a_live_node_id_is_refused(shared_cluster, client, healthy, actors, tmp_path):
    h = actors("bystander")
    node_id = client.actor("bystander")["node_id"]
    cmd = [sys.executable, "-m", "ftrl", "--log-level", "WARNING", "worker",
           "--coordinator", shared_cluster.address, "--node-id", node_id, "--slots", "1",
           "--log-dir", str(tmp_path / "logs"), "--token-file", str(shared_cluster.token_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                          env={**shared_cluster.env, **cluster_env()}, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert f"node id {node_id!r} is already registered by a live worker" in proc.stderr
    assert "--node-id" in proc.stderr
    assert h.call("incr") == 1
    assert client.actor("bystander")["state"] == "ALIVE"
