"""The coordinator's HTTP server in-process (127.0.0.1:0) over a Controller with a frozen
clock: routes, auth, parsing limits, hostile clients, /metrics and /api/status."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ftrl import __version__
from ftrl.coordinator import http as http_module
from ftrl.coordinator import views
from ftrl.coordinator.http import COOKIE, HttpLimits, HttpServer, session_value
from ftrl.coordinator.records import ActorRecord, ActorState, NodeRecord, NodeState
from ftrl.coordinator.server import CoordinatorServer
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.convert import actor_dict, node_dict
from ftrl.wire.errors import ConfigError
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.security import Security, secure_channel
from tests.procs import REPO
from tests.unit.coordinator.controller_harness import Harness

TOKEN = "s3cret-cluster-token-for-tests"
AUTH = f"Authorization: Bearer {TOKEN}\r\n"


# ---------------------------------------------------------------- a raw client


async def raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send `data` as is; (status, headers, body) of the answer (status 0: closed unanswered)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        async with asyncio.timeout(timeout):
            reply = await reader.read(-1)
    except ConnectionResetError:
        reply = b""
    finally:
        writer.close()
    return parse_reply(reply)


def parse_reply(reply: bytes) -> tuple[int, dict[str, str], bytes]:
    if not reply:
        return 0, {}, b""
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), headers, body


async def get(port: int, path: str, headers: str = "", method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return await raw(port, f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}\r\n".encode())


# ---------------------------------------------------------------- a populated coordinator


def job_request(job_id: str, tmp_path: Path, **config) -> pb.SubmitJobRequest:
    data = {"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 1, **config}
    return pb.SubmitJobRequest(job_id=job_id, config=codec.encode(data), output_dir=str(tmp_path / job_id))


def populate(h: Harness, tmp_path: Path) -> None:
    """3 nodes; an actor ALIVE, one restarted after a SIGKILL, one that failed to start;
    a job with one learner that reported 3 iterations (the second without a return)."""
    for node in ("n1", "n2", "n3"):
        h.register(node, cpu=4)
    h.create("a/one")
    h.started("a/one")
    h.create("a/two", max_restarts=3)
    node, inc = h.started("a/two")
    h.report(node, "a/two", inc, pb.REPORT_EXITED, exit_code=-9, reason="killed by signal SIGKILL")
    for _ in range(3):
        h.advance(1.0)
        h.heartbeat("n1", "n2", "n3")
    h.started("a/two")
    h.create("broken", class_path="tests.actors:BadInit")
    node, start = h.last_start("broken")
    h.report(node, "broken", start.incarnation, pb.REPORT_START_FAILED, reason="BadInit refuses to start",
             error_type="RuntimeError")
    h.c.submit_job(job_request("j1", tmp_path, num_learners=1))
    h.started("j1/algorithm")
    driver = h.c.actors["j1/algorithm"]
    rows = [pb.JobResult(iteration=i, row=codec.encode(
        {"iteration": i, "episode_return_mean": ret, "num_healthy_env_runners": 1, "mesh_epoch": 2}))
        for i, ret in ((1, 10.0), (2, float("nan")), (3, 30.5))]
    h.c.report_job(pb.JobReport(job_id="j1", incarnation=driver.incarnation, stage=pb.JOB_RUNNING,
                                iteration=3, env_steps_sampled=300, rows=rows))


class Served:
    def __init__(self, h: Harness, grpc_server: CoordinatorServer, http: HttpServer, token_file: Path):
        self.h, self.grpc, self.http, self.token_file = h, grpc_server, http, token_file

    @property
    def port(self) -> int:
        return self.http.port


async def serve(tmp_path: Path, limits: HttpLimits | None = None, token: str | None = TOKEN,
                host: str = "127.0.0.1", public_metrics: bool = False) -> Served:
    h = Harness()
    populate(h, tmp_path)
    security = Security(token=token, insecure=token is None)
    grpc_server = CoordinatorServer(h.c, security, "127.0.0.1", 0)
    await grpc_server.start()
    http = HttpServer(h.c, token, host, 0, public_metrics=public_metrics,
                      metrics=grpc_server.servicer.metrics, limits=limits)
    await http.start()
    token_file = tmp_path / "token"
    token_file.write_text(f"{token}\n")
    token_file.chmod(0o600)
    return Served(h, grpc_server, http, token_file)


@pytest.fixture
async def served(tmp_path):
    s = await serve(tmp_path)
    yield s
    await s.http.stop()
    await s.grpc.stop(0)


# ---------------------------------------------------------------- routes and auth


async def test_routes_and_token(served):
    port = served.port
    status, headers, body = await get(port, "/healthz")
    assert (status, body) == (200, b"ok\n") and headers["connection"] == "close"
    for path in ("/api/status", "/api/jobs/j1/curve"):
        status, headers, body = await get(port, path)
        assert status == 401 and headers["www-authenticate"].startswith("Bearer")
        assert "cluster token" in json.loads(body)["error"]
        assert (await get(port, path, "Authorization: Bearer wrong\r\n"))[0] == 401
        assert (await get(port, path, f"Authorization: Basic {TOKEN}\r\n"))[0] == 401
        assert (await get(port, path, AUTH))[0] == 200
    status, headers, body = await get(port, "/api/status", AUTH, method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 100
    # the page: a login form without the token, the page with it
    status, headers, body = await get(port, "/")
    assert status == 401 and b'<form method="post" action="/login">' in body and TOKEN.encode() not in body
    assert "script-src 'sha256-" in headers["content-security-policy"]
    status, headers, body = await get(port, "/", AUTH)
    assert status == 200 and b'id="actors"' in body and headers["content-type"].startswith("text/html")
    assert "script-src 'sha256-" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"
    # unknown paths, wrong methods
    assert (await get(port, "/nope", AUTH))[0] == 404
    assert (await get(port, "/api/jobs/nope/curve", AUTH))[0] == 404
    assert (await get(port, "/api/jobs/a%2Fb/curve", AUTH))[0] == 404
    status, headers, _ = await get(port, "/api/status", AUTH, method="DELETE")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert (await get(port, "/metrics", method="POST"))[0] == 405


async def test_login_sets_a_session_cookie(served):
    port = served.port

    def login(token: str, extra: str = "") -> bytes:
        body = f"token={token}".encode()
        return (f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: "
                f"application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body

    status, headers, body = await raw(port, login("wrong"))
    assert status == 401 and b"not the cluster token" in body and "set-cookie" not in headers
    assert (await raw(port, login(TOKEN, "Origin: http://evil.example\r\n")))[0] == 403
    status, headers, _ = await raw(port, login(TOKEN, f"Origin: http://127.0.0.1:{port}\r\n"))
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    assert value == session_value(TOKEN) and len(value) == 64
    for path in ("/", "/api/status"):
        assert (await get(port, path, f"Cookie: other=1; {COOKIE}={value}\r\n"))[0] == 200
        assert (await get(port, path, f"Cookie: {COOKIE}={value[:-1]}0\r\n"))[0] == 401
        assert (await get(port, path, f"Cookie: {COOKIE}={TOKEN}\r\n"))[0] == 401
    status, headers, _ = await raw(port, b"POST /logout HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
    assert status == 303 and "Max-Age=0" in headers["set-cookie"]


async def test_metrics_and_healthz_open_only_on_loopback(tmp_path):
    s = await serve(tmp_path, host="0.0.0.0")
    try:
        for path in ("/healthz", "/metrics"):
            assert (await get(s.port, path))[0] == 401
            assert (await get(s.port, path, AUTH))[0] == 200
    finally:
        await s.http.stop()
        await s.grpc.stop(0)
    s = await serve(tmp_path, host="0.0.0.0", public_metrics=True)
    try:
        assert (await get(s.port, "/metrics"))[0] == 200
        assert (await get(s.port, "/api/status"))[0] == 401
    finally:
        await s.http.stop()
        await s.grpc.stop(0)


async def test_no_token_everything_open(tmp_path):
    s = await serve(tmp_path, token=None)
    try:
        for path in ("/", "/api/status", "/metrics", "/healthz", "/api/jobs/j1/curve"):
            assert (await get(s.port, path))[0] == 200, path
    finally:
        await s.http.stop()
        await s.grpc.stop(0)


# ---------------------------------------------------------------- malformed and hostile input


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET /healthz\r\nHost: 127.0.0.1\r\n\r\n", 400),  # no version
    (b"GET  /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),  # two spaces
    (b"G(T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),  # not a token
    (b"GET healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),  # not origin form
    (b"GET http://x/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (b"GET /he\x01lthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (b"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505),
    (b"GET /healthz HTTP/x\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: [::1]\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400),  # space before the colon
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n folded\r\n\r\n", 400),  # obs-fold
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\x00b\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nNoColon\r\n\r\n", 400),
    (b"\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.0\r\n\r\n", 200),  # 1.0 needs no Host
    (b"GET /healthz?x=%zz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200),
    (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
    (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", 400),
    (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
    (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\nshort", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello", 413),  # no body here
    (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n", 413),
])
async def test_malformed_requests(served, request_bytes, status):
    if request_bytes.endswith(b"short"):  # the body ends early: the client half-closes
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(request_bytes)
        writer.write_eof()
        async with asyncio.timeout(10):
            got = parse_reply(await reader.read(-1))[0]
        writer.close()
        assert got in (0, status)  # closed unanswered is fine for a body cut short
    else:
        assert (await raw(served.port, request_bytes))[0] == status
    assert (await get(served.port, "/healthz"))[0] == 200


async def test_huge_headers_and_bodies(served):
    port = served.port
    big = "X-Big: " + "a" * 20_000 + "\r\n"
    assert (await get(port, "/healthz", big))[0] == 431
    many = "".join(f"X-{i}: v\r\n" for i in range(101))
    assert (await get(port, "/healthz", many))[0] == 431
    assert (await get(port, "/healthz", "".join(f"X-{i}: v\r\n" for i in range(90))))[0] == 200
    # a 10 MB body sent along with its headers: 413, answered before it is all read
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded"
                 b"\r\nContent-Length: 10000000\r\n\r\n" + b"t" * (1 << 20))
    async with asyncio.timeout(10):
        reply = await reader.read(-1)
    writer.close()
    assert parse_reply(reply)[0] == 413
    assert (await get(port, "/healthz"))[0] == 200


async def test_slowloris_is_cut_off(tmp_path):
    s = await serve(tmp_path, limits=HttpLimits(request_timeout_s=1.0))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        t0 = time.monotonic()
        trickle = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
        reply = b""
        for byte in trickle:  # one byte every 50 ms, never finishing the headers
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break
            try:
                async with asyncio.timeout(0.05):
                    reply += await reader.read(1024)
            except TimeoutError:
                continue
            if reply:
                break
        async with asyncio.timeout(5):
            reply += await reader.read(-1)
        took = time.monotonic() - t0
        writer.close()
        assert parse_reply(reply)[0] == 408 and took < 2.5, (reply[:80], took)
        # a client that connects and sends nothing is closed as well
        t0 = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        async with asyncio.timeout(5):
            assert parse_reply(await reader.read(-1))[0] == 408
        assert time.monotonic() - t0 < 2.5
        writer.close()
        assert (await get(s.port, "/healthz"))[0] == 200
    finally:
        await s.http.stop()
        await s.grpc.stop(0)


async def test_connections_are_capped(tmp_path):
    s = await serve(tmp_path, limits=HttpLimits(max_connections=20, request_timeout_s=5.0))
    idle = []
    try:
        for _ in range(20):  # these hold every slot (they send nothing)
            idle.append(await asyncio.open_connection("127.0.0.1", s.port))
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        turned_away = [await raw(s.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=3)
                       for _ in range(10)]
        assert time.monotonic() - t0 < 3.0  # refused at once, not after the idle ones time out
        assert all(status in (0, 503) for status, _, _ in turned_away), turned_away
        assert any(status == 503 for status, _, _ in turned_away)
        assert s.http.refused >= 10
    finally:
        for _, writer in idle:
            writer.close()
    await asyncio.sleep(0.2)
    try:
        assert (await get(s.port, "/healthz"))[0] == 200  # slots free again
        # the gRPC side of the same loop answered throughout
        async with secure_channel(f"127.0.0.1:{s.grpc.port}", Security(), channel_options(4 << 20)) as ch:
            info = await pb_grpc.CoordinatorStub(ch).GetClusterInfo(
                pb.ClusterInfoRequest(), metadata=Security(token=TOKEN).metadata(), timeout=5)
        assert info.version == __version__
    finally:
        await s.http.stop()
        await s.grpc.stop(0)


async def test_port_in_use_is_a_config_error(served):
    other = HttpServer(served.h.c, TOKEN, "127.0.0.1", served.port)
    with pytest.raises(ConfigError, match=f"--http-port {served.port}: cannot listen on 127.0.0.1:{served.port}"):
        await other.start()
    with pytest.raises(ConfigError, match="not a port number"):
        await HttpServer(served.h.c, TOKEN, "127.0.0.1", 70000).start()


async def test_stop_closes_open_connections(tmp_path):
    s = await serve(tmp_path)
    reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
    writer.write(b"GET /healthz HTTP/1.1\r\n")  # half a request
    await asyncio.sleep(0.1)
    t0 = time.monotonic()
    await s.http.stop()
    await s.grpc.stop(0)
    async with asyncio.timeout(5):
        assert await reader.read(-1) == b""
    assert time.monotonic() - t0 < 3
    writer.close()


# ---------------------------------------------------------------- /metrics


async def test_metrics(served):
    # one heartbeat through the real servicer path, to fill the histogram
    h = served.h
    async with secure_channel(f"127.0.0.1:{served.grpc.port}", Security(), channel_options(4 << 20)) as ch:
        stub = pb_grpc.CoordinatorStub(ch)
        md = Security(token=TOKEN).metadata()
        reply = await stub.RegisterNode(pb.RegisterNodeRequest(
            node_id="sim", session_id="s", address="127.0.0.1", resources={"cpu": 1}, slots=1,
            version=__version__), metadata=md, timeout=5)
        call = stub.Connect(metadata=md)
        for seq in range(1, 4):
            await call.write(pb.NodeMessage(node_id="sim", epoch=reply.node_epoch,
                                            heartbeat=pb.Heartbeat(seq=seq)))
        async with asyncio.timeout(5):
            while (await call.read()).ack.seq < 3:  # the first beat is handled by Connect itself
                pass
        call.cancel()
    assert (await get(served.port, "/healthz"))[0] == 200
    status, headers, body = await get(served.port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}

    def value(name: str, **labels: str) -> float:
        for sample in families[name].samples:
            if sample.labels == labels and sample.name in (name, name + "_total"):
                return sample.value
        raise AssertionError(f"no {name}{labels} in {families[name].samples}")

    assert value("ftrl_nodes", state="ALIVE") == 4 and value("ftrl_nodes", state="LOST") == 0
    assert value("ftrl_actors", state="ALIVE") == 3 and value("ftrl_actors", state="DEAD") == 1
    assert value("ftrl_actor_restarts") == 1 and families["ftrl_actor_restarts"].type == "counter"
    assert value("ftrl_actor_failures") == 2
    assert value("ftrl_node_failures", reason="lost") == 0
    assert value("ftrl_job_iteration", job="j1") == 3
    assert value("ftrl_job_env_steps_sampled", job="j1") == 300
    assert value("ftrl_job_episode_return_mean", job="j1") == 30.5
    assert value("ftrl_job_healthy_env_runners", job="j1") == 1
    assert value("ftrl_job_learner_mesh_epoch", job="j1") == 2
    assert value("ftrl_job_stage", job="j1", stage="RUNNING") == 1
    assert value("ftrl_coordinator_uptime_seconds") >= 0
    assert value("ftrl_build_info", version=__version__, coordinator_id=h.c.coordinator_id) == 1
    hist = {s.name: s for s in families["ftrl_heartbeat_handling_seconds"].samples if not s.labels.get("le")}
    assert families["ftrl_heartbeat_handling_seconds"].type == "histogram"
    assert families["ftrl_coordinator_loop_lag_seconds"].type == "histogram"
    assert hist["ftrl_heartbeat_handling_seconds_count"].value >= 2
    assert 0 < hist["ftrl_heartbeat_handling_seconds_sum"].value < 1
    assert value("ftrl_http_requests", route="healthz", code="200") == 1
    # OpenMetrics when the scraper asks for it
    status, headers, body = await get(served.port, "/metrics", "Accept: application/openmetrics-text; version=1.0.0\r\n")
    assert status == 200 and "openmetrics" in headers["content-type"] and body.endswith(b"# EOF\n")
    # no series per node or per actor
    assert not any(label in s.labels for f in families.values() for s in f.samples for label in ("node", "actor"))


# ---------------------------------------------------------------- /api/status


def _without_timing(data: dict) -> dict:
    data = json.loads(json.dumps(data))
    data["cluster"].pop("uptime_s")
    for n in data["nodes"]:
        n.pop("last_heartbeat_age_s")
    return data


async def test_status_equals_ftrl_status_json(served):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ftrl", "status", "--json", "--coordinator", f"127.0.0.1:{served.grpc.port}",
        "--token-file", str(served.token_file), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("FTRL_")}, "PYTHONPATH": str(REPO)})
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    cli = json.loads(out)
    status, _, body = await get(served.port, "/api/status", AUTH)
    assert status == 200
    api = json.loads(body)
    assert set(api) == {"cluster", "nodes", "actors", "learner_groups", "jobs", "events", "deaths", "curves",
                        "experiments"}
    assert api["experiments"] == []  # no tuner actor (ftrl.tune.controller) on this cluster
    keys = ["cluster", "nodes", "actors", "learner_groups", "jobs"]
    # the CLI prints NaN for a non-finite metric; the API sends null (JSON has no NaN)
    for job in cli["jobs"]:
        job["metrics"] = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in job["metrics"].items()}
    assert _without_timing({k: api[k] for k in keys}) == _without_timing({k: cli[k] for k in keys})
    assert [a["name"] for a in api["actors"]] == ["a/one", "a/two", "broken", "j1/algorithm"]
    two = next(a for a in api["actors"] if a["name"] == "a/two")
    assert two["restarts"] == 1 and two["state"] == "ALIVE" and two["death_reason"] == ""
    assert api["deaths"]["a/two"]["reason"] == "killed by signal SIGKILL"
    assert api["deaths"]["a/two"]["incarnation"] == 1
    assert api["curves"]["j1"] == {"iteration": [1, 2, 3], "episode_return_mean": [10.0, None, 30.5]}
    types = [e["type"] for e in api["events"]]
    assert "RESTARTED" in types and "DEAD" in types and "JOB" in types
    status, _, body = await get(served.port, "/api/status?prefix=a/", AUTH)
    assert [a["name"] for a in json.loads(body)["actors"]] == ["a/one", "a/two"]
    status, _, body = await get(served.port, "/api/jobs/j1/curve", AUTH)
    assert json.loads(body) == {"job_id": "j1", "iteration": [1, 2, 3], "episode_return_mean": [10.0, None, 30.5]}


async def test_status_of_a_big_cluster_is_built_in_slices(tmp_path):
    """2,000 nodes and 4,000 actors: the body is built in slices (the loop runs between
    them), concurrent requests share one build, and new rows extend the curve."""
    s = await serve(tmp_path, limits=HttpLimits(slice_s=0.001))
    h = s.h
    try:
        for i in range(2000):
            h.register(f"big-{i:04d}", cpu=2, connect=False)
        for i in range(4000):
            h.c.actors[f"big/{i:04d}"] = ActorRecord(
                spec=pb.ActorSpec(name=f"big/{i:04d}", class_path="tests.actors:Counter"),
                node_id=f"big-{i // 2:04d}")
        gaps: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        t = asyncio.create_task(ticker())
        try:
            replies = await asyncio.gather(*[get(s.port, "/api/status", AUTH) for _ in range(5)])
        finally:
            stop.set()
            await t
        bodies = {r[2] for r in replies}
        assert all(r[0] == 200 for r in replies) and len(bodies) == 1  # one shared build
        data = json.loads(bodies.pop())
        assert len(data["nodes"]) == 2003 and len(data["actors"]) == 4004
        assert len(gaps) > 20  # the loop ran between the slices
        driver = h.c.actors["j1/algorithm"]
        h.c.report_job(pb.JobReport(job_id="j1", incarnation=driver.incarnation, stage=pb.JOB_RUNNING,
                                    iteration=4, env_steps_sampled=400, rows=[pb.JobResult(
                                        iteration=4, row=codec.encode({"episode_return_mean": 40}))]))
        # records change in place between builds: each shows its new fields (no stale JSON)
        rec = h.c.actors["big/0007"]
        rec.restarts, rec.pid, rec.death_reason = 3, 777, "boom"
        rec.set_state(ActorState.RESTARTING)
        node = h.c.nodes["big-0003"]
        node.failures, node.connected = 5, True
        node.reserve("big/0007", {"cpu": 1.0})
        del h.c.actors["big/0009"]
        h.now += 2.5  # heartbeat ages move
        await asyncio.sleep(0.6)  # past the cache
        data = json.loads((await get(s.port, "/api/status", AUTH))[2])
        assert data["curves"]["j1"]["iteration"] == [1, 2, 3, 4]
        assert data["jobs"][0]["iteration"] == 4
        assert data["actors"] == [actor_dict(r.to_proto()) for r in views.actor_records(h.c)]
        assert data["nodes"] == [node_dict(n.to_proto(h.now)) for n in views.node_records(h.c)]
        assert data["nodes"][3]["last_heartbeat_age_s"] == 2.5
    finally:
        await s.http.stop()
        await s.grpc.stop(0)


async def test_a_bug_answers_500_and_the_server_goes_on(served, monkeypatch, caplog):
    async def broken(prefix: str = "") -> bytes:
        raise RuntimeError("a bug")

    monkeypatch.setattr(served.http.status, "body", broken)
    status, _, body = await get(served.port, "/api/status", AUTH)
    assert status == 500 and json.loads(body)["error"].startswith("internal error")
    assert "a bug" in caplog.text
    assert (await get(served.port, "/healthz"))[0] == 200


def test_job_infos_equal_one_scan_per_job(tmp_path):
    """views.job_infos (one pass over the actors) gives what jobs.info gives per job."""
    h = Harness()
    populate(h, tmp_path)
    h.c.submit_job(job_request("j1x", tmp_path))  # a job id that is a prefix of nothing else's
    h.create("j1/env_runner/0")
    h.create("j1x/env_runner/0")
    h.create("j1/env_runner/1")
    h.c.kill_actor("j1/env_runner/1")
    jobs = views.job_records(h.c)
    assert list(views.job_infos(h.c, jobs)) == [views.job_info(h.c, j) for j in jobs]
    assert list(views.job_infos(h.c, jobs)[0].actors) == ["j1/algorithm", "j1/env_runner/0"]


async def test_status_reuses_records_until_something_changes(served, monkeypatch):
    """Nothing durable changed: the records part is reused (only heartbeat ages move); a
    field changed without a durable write (no controller path does that; the periodic
    check is a safety net) shows after that check, made in the background."""
    builder = served.http.status
    monkeypatch.setattr(builder, "limits", HttpLimits(status_cache_s=0.0))

    async def status() -> dict:
        return json.loads(await builder.body())

    first = await status()
    records = builder._records
    served.h.now += 1.5
    second = await status()
    assert builder._records is records  # reused
    assert [n["last_heartbeat_age_s"] for n in second["nodes"]] == [1.5] * 3
    node = served.h.c.nodes["n1"]
    node.failures = 42  # changed without a durable write
    assert (await status())["nodes"][0]["failures"] == first["nodes"][0]["failures"]
    monkeypatch.setattr(builder, "FULL_CHECK_S", 0.0)
    await status()  # starts the check
    await builder._checking
    assert (await status())["nodes"][0]["failures"] == 42
    # a durable change is seen at once
    served.h.c.kill_actor("a/one", "test")
    assert next(a for a in (await status())["actors"] if a["name"] == "a/one")["state"] == "DEAD"


async def test_loopback_refuses_dns_names_in_host(served, tmp_path):
    """DNS rebinding: a page whose name now points at 127.0.0.1 must not read /metrics."""
    port = served.port
    for host, status in (("rebound.example.com", 421), ("rebound.example.com:80", 421),
                         ("localhost", 200), (f"localhost:{port}", 200), ("[::1]:80", 200),
                         ("127.0.0.1", 200), ("LOCALHOST", 200)):
        got = await raw(port, f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert got[0] == status, (host, got)
    s = await serve(tmp_path, host="0.0.0.0")  # off loopback: names are fine (and the token needed)
    try:
        assert (await raw(s.port, f"GET /healthz HTTP/1.1\r\nHost: coord.example\r\n{AUTH}\r\n".encode()))[0] == 200
    finally:
        await s.http.stop()
        await s.grpc.stop(0)


def _changed(value):
    """Another value of the same kind, or None where a field cannot be changed in place."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, ActorState | NodeState):
        return next(s for s in type(value) if s != value)
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return None


def test_status_keys_cover_every_field_shown(tmp_path):
    """The per-record keys of /api/status: any field whose change shows in the record's
    proto view (a new one too) must change the key, or the status page shows stale JSON."""
    h = Harness()
    populate(h, tmp_path)
    for rec_type, rec, key, view in (
            (ActorRecord, h.c.actors["a/two"], http_module._actor_key, lambda r: r.to_proto()),
            (NodeRecord, h.c.nodes["n2"], http_module._node_key, lambda n: n.to_proto(h.now))):
        for f in dataclasses.fields(rec_type):
            if f.name == "last_heartbeat":
                continue  # spliced in on every build
            old = getattr(rec, f.name)
            before_key, before_view = key(rec), view(rec)
            if isinstance(old, set):
                old.add("zz/extra")
                mutated = True
            elif isinstance(old, dict):
                old["zz"] = old.get("zz", 0.0) + 1.0
                mutated = True
            else:
                new = _changed(old)
                mutated = new is not None
                if mutated:
                    setattr(rec, f.name, new)
            if mutated and view(rec) != before_view:
                assert key(rec) != before_key, f"{rec_type.__name__}.{f.name} is shown but not in the key"
