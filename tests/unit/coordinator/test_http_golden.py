"""The coordinator's HTTP answers: a fixed set of requests (good ones and every kind of
bad one) against an in-process HttpServer, compared with the raw answers (status line,
headers, body) recorded from the server before it was put on h11, in
tests/fixtures/http_responses/responses.json. What varies between runs (the
coordinator id, wall-clock times, the temp dir) is normalised on both sides.

Every answer is compared byte for byte. When h11 became the parser, 23 answers to
malformed requests changed their text in the fixture (recorded again then), none its
status: 21 now carry h11's text (ftrl.coordinator.http.rules), 2 (a bare LF) the raw
check's; the pages, the API and the 401/403/421 answers did not change.

Record again (only on purpose, on the code whose answers are right):
`python -m tests.unit.coordinator.test_http_golden`.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ftrl.coordinator.http import HttpLimits, HttpServer, session_value
from tests.procs import REPO
from tests.unit.coordinator.controller_harness import Harness
from tests.unit.coordinator.test_http import TOKEN, populate

FIXTURE = REPO / "tests" / "fixtures" / "http_responses" / "responses.json"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
H = b"Host: 127.0.0.1\r\n"


def get(path: str, extra: bytes = b"", method: str = "GET", version: str = "HTTP/1.1") -> bytes:
    return f"{method} {path} {version}\r\n".encode() + H + extra + b"\r\n"


def login(token: str, extra: bytes = b"", version: str = "HTTP/1.1", host: bytes = H) -> bytes:
    body = f"token={token}".encode()
    return (f"POST /login {version}\r\n".encode() + host + b"Content-Type: application/x-www-form-urlencoded\r\n"
            + f"Content-Length: {len(body)}\r\n".encode() + extra + b"\r\n" + body)


def padded(total_head: int) -> bytes:
    """GET /healthz whose head (through its final CRLF CRLF) is `total_head` bytes."""
    start = b"GET /healthz HTTP/1.1\r\n" + H + b"X-Pad: "
    return start + b"a" * (total_head - len(start) - 4) + b"\r\n\r\n"


@dataclass(frozen=True)
class Case:
    name: str
    request: bytes
    variant: str = "token"  # which server (see VARIANTS)
    mode: str = "send"  # send: write, read to EOF; eof: write, half-close, read; connect: write nothing


#: server variants: (token, host, limits)
VARIANTS = {
    "token": (TOKEN, "127.0.0.1", HttpLimits()),
    "open": (None, "127.0.0.1", HttpLimits()),
    "public": (TOKEN, "0.0.0.0", HttpLimits()),
    "slow": (TOKEN, "127.0.0.1", HttpLimits(request_timeout_s=0.3)),
    "bug": (TOKEN, "127.0.0.1", HttpLimits()),
    "capped": (TOKEN, "127.0.0.1", HttpLimits(max_connections=1, request_timeout_s=5.0)),
}

CASES: list[Case] = [
    # ------------------------------------------------ routes, auth, pages
    Case("metrics_first", get("/metrics")),
    Case("healthz", get("/healthz")),
    Case("healthz_head", get("/healthz", method="HEAD")),
    Case("page_no_token", get("/")),
    Case("page_head_no_token", get("/", method="HEAD")),
    Case("page_token", get("/", AUTH)),
    Case("status_no_token", get("/api/status")),
    Case("status_wrong_token", get("/api/status", b"Authorization: Bearer wrong\r\n")),
    Case("status_basic", get("/api/status", f"Authorization: Basic {TOKEN}\r\n".encode())),
    Case("status", get("/api/status", AUTH)),
    Case("status_lowercase_bearer", get("/api/status", f"Authorization: bearer {TOKEN}\r\n".encode())),
    Case("status_head", get("/api/status", AUTH, method="HEAD")),
    Case("status_prefix", get("/api/status?prefix=a/", AUTH)),
    Case("status_long_prefix", get("/api/status?prefix=" + "p" * 201, AUTH)),
    Case("status_bad_query", get("/api/status?prefix=%ff", AUTH)),
    Case("curve", get("/api/jobs/j1/curve", AUTH)),
    Case("curve_no_job", get("/api/jobs/nope/curve", AUTH)),
    Case("curve_slash", get("/api/jobs/a%2Fb/curve", AUTH)),
    Case("curve_no_token", get("/api/jobs/j1/curve")),
    Case("login_good", login(TOKEN, b"Origin: http://127.0.0.1\r\n")),
    Case("login_bad", login("wrong")),
    Case("login_other_site", login(TOKEN, b"Origin: http://evil.example\r\n")),
    Case("login_null_origin", login(TOKEN, b"Origin: null\r\n")),
    Case("login_get", get("/login")),
    Case("login_not_a_form", get("/login", b"Content-Length: 3\r\n", method="POST") + b"%%%"),
    Case("logout", get("/logout", b"Content-Length: 0\r\n", method="POST")),
    Case("cookie", get("/api/status", f"Cookie: a=1; ftrl_session={'0' * 64}\r\n".encode(), method="HEAD")),
    Case("cookie_good", get("/api/status?prefix=a/", f"Cookie: a=1; ftrl_session={session_value(TOKEN)}\r\n".encode())),
    Case("not_found", get("/nope")),
    Case("not_found_head", get("/nope", method="HEAD")),
    Case("method_not_allowed", get("/api/status", AUTH, method="DELETE")),
    Case("metrics_post", get("/metrics", method="POST")),
    Case("lowercase_method", get("/healthz", method="get")),
    Case("m_search", get("/healthz", method="M-SEARCH")),
    Case("long_method", get("/healthz", method="X" * 5000)),
    Case("metrics_openmetrics", get("/metrics", b"Accept: application/openmetrics-text; version=1.0.0\r\n")),
    # ------------------------------------------------ Host on loopback
    Case("host_dns", b"GET /metrics HTTP/1.1\r\nHost: rebound.example.com\r\n\r\n"),
    Case("host_dns_port", b"GET /metrics HTTP/1.1\r\nHost: rebound.example.com:80\r\n\r\n"),
    Case("host_localhost_port", b"GET /healthz HTTP/1.1\r\nHost: LOCALHOST:8080\r\n\r\n"),
    Case("host_v6", b"GET /healthz HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"),
    Case("host_two_colons", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:80:80\r\n\r\n"),
    Case("host_empty", b"GET /healthz HTTP/1.1\r\nHost:\r\n\r\n"),
    Case("host_dns_not_found", b"GET /nope HTTP/1.1\r\nHost: rebound.example.com\r\n\r\n"),
    # ------------------------------------------------ versions
    Case("http10", b"GET /healthz HTTP/1.0\r\n\r\n"),
    Case("http10_two_hosts", b"GET /healthz HTTP/1.0\r\nHost: a.example\r\nHost: b.example\r\n\r\n"),
    Case("http10_login_two_hosts", login(TOKEN, version="HTTP/1.0", host=b"Host: x.example\r\nHost: y.example\r\n")),
    Case("http10_chunked", b"POST /login HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    Case("http20", b"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("http20_bad_target", b"GET /\x01 HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("http20_two_hosts", b"GET /healthz HTTP/2.0\r\nHost: a\r\nHost: b\r\n\r\n"),
    Case("http_x", b"GET /healthz HTTP/x\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("http_lower", b"GET /healthz http/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    # ------------------------------------------------ request lines
    Case("no_version", b"GET /healthz\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("two_spaces", b"GET  /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("two_spaces_before_version", b"GET /healthz  HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("trailing_space", b"GET /healthz HTTP/1.1 \r\nHost: 127.0.0.1\r\n\r\n"),
    Case("leading_space", b" GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("tab_separator", b"GET\t/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("bad_method", b"G(T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("not_origin_form", b"GET healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("absolute_form", b"GET http://x/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("asterisk", b"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("connect", b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("control_in_target", b"GET /he\x01lthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("del_in_target", b"GET /he\x7flthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("high_byte_in_target", b"GET /he\xc3\xa9lthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("long_target", b"GET /" + b"a" * 4096 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("target_4096", b"GET /" + b"a" * 4095 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("leading_crlf", b"\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("bad_query_ignored", b"GET /healthz?x=%zz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("encoded_path", b"GET /heal%74hz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    # ------------------------------------------------ header lines
    Case("no_host", b"GET /healthz HTTP/1.1\r\n\r\n"),
    Case("two_hosts", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: [::1]\r\n\r\n"),
    Case("two_hosts_gzip", b"GET /healthz HTTP/1.1\r\nHost: 1.1.1.1\r\nHost: 2.2.2.2\r\nTransfer-Encoding: gzip\r\n\r\n"),
    Case("space_before_colon", b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n"),
    Case("obs_fold", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n folded\r\n\r\n"),
    Case("obs_fold_first", b"GET /healthz HTTP/1.1\r\n Host: 127.0.0.1\r\n\r\n"),
    Case("high_byte_in_name", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX\xff: 1\r\n\r\n"),
    Case("obs_fold_tab", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\r\n\tfolded\r\n\r\n"),
    Case("nul_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\x00b\r\n\r\n"),
    Case("soh_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\x01b\r\n\r\n"),
    Case("del_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\x7fb\r\n\r\n"),
    Case("vt_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\x0bb\r\n\r\n"),
    Case("high_byte_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: caf\xc3\xa9\r\n\r\n"),
    Case("tab_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\tb\t\r\n\r\n"),
    Case("empty_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX:\r\n\r\n"),
    Case("underscore_name", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX_Y: 1\r\n\r\n"),
    Case("no_colon", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nNoColon\r\n\r\n"),
    Case("empty_name", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n: v\r\n\r\n"),
    Case("bare_cr_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\rb\r\n\r\n"),
    Case("bare_lf_in_value", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\nX: y\r\n\r\n"),
    Case("bare_lf_in_target", b"GET /a\nb HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n"),
    Case("bare_lf_head_then_crlf", b"GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\nmore\r\n\r\n"),
    Case("bare_lf_head_eof", b"GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\n", mode="eof"),
    Case("crlf_lf_eof", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\n", mode="eof"),
    Case("connection_close", get("/healthz", b"Connection: close\r\n")),
    Case("upgrade", get("/healthz", b"Connection: Upgrade\r\nUpgrade: websocket\r\n")),
    Case("expect_continue", login(TOKEN, b"Expect: 100-continue\r\n")),
    Case("pipelined", get("/healthz") + get("/nope")),
    Case("headers_100", get("/healthz", b"".join(b"X-%d: v\r\n" % i for i in range(99)))),
    Case("headers_101", get("/healthz", b"".join(b"X-%d: v\r\n" % i for i in range(100)))),
    Case("headers_101_and_bad", get("/healthz", b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"Bad\r\n")),
    Case("headers_101_http20", b"GET /healthz HTTP/2.0\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n"),
    Case("head_16k", padded((16 << 10) + 4)),
    Case("head_16k_plus_1", padded((16 << 10) + 5)),
    Case("head_20k", get("/healthz", b"X-Big: " + b"a" * 20_000 + b"\r\n")),
    Case("head_20k_unfinished", b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 20_000),
    # ------------------------------------------------ bodies and framing
    Case("chunked_login", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    Case("chunked_and_length", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                               b"Content-Length: 3\r\n\r\nabc"),
    Case("gzip_login", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
    Case("gzip_and_length", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n"
                            b"Content-Length: 3\r\n\r\nabc"),
    Case("two_te", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    Case("chunked_not_found", b"POST /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    Case("gzip_not_found", b"POST /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
    Case("gzip_wrong_method", b"PUT /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
    Case("gzip_dns_host", b"POST /login HTTP/1.1\r\nHost: evil.example\r\nTransfer-Encoding: gzip\r\n\r\n"),
    Case("chunked_healthz", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    Case("two_lengths", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"),
    Case("same_two_lengths", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
                             b"Content-Length: 5\r\n\r\ntoken"),
    Case("length_list", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1, 1\r\n\r\na"),
    Case("length_negative", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n"),
    Case("length_plus", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: +1\r\n\r\na"),
    Case("length_13_digits", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0000000000001\r\n\r\na"),
    Case("length_21_digits", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + b"9" * 21 + b"\r\n\r\n"),
    Case("length_x_not_found", b"POST /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n"),
    Case("length_conflict_405", b"DELETE /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\n"
                                b"Content-Length: 2\r\n\r\n"),
    Case("length_padded", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length:  5 \r\n\r\nhello"),
    Case("length_zero", get("/healthz", b"Content-Length: 0\r\n")),
    Case("length_00", get("/healthz", b"Content-Length: 00\r\n")),
    Case("body_on_healthz", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello"),
    Case("body_on_not_found", b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello"),
    Case("body_too_big", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n"
                         + b"t" * (1 << 20)),
    Case("body_4097", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4097\r\n\r\n" + b"t" * 4097),
    Case("body_4096", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4096\r\n\r\ntoken="
                      + b"t" * 4090),
    Case("body_short_eof", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\nshort", mode="eof"),
    Case("head_partial_eof", b"GET /healthz HTTP/1.1\r\nHost: 127.0", mode="eof"),
    Case("nothing_eof", b"", mode="eof"),
    Case("tls_hello_eof", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", mode="eof"),
    # ------------------------------------------------ timeouts (a 0.3 s request limit)
    Case("slow_nothing", b"", "slow", "connect"),
    Case("slow_partial_head", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", "slow"),
    Case("slow_crlf_only", b"\r\n", "slow"),
    Case("slow_tls_hello", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", "slow"),
    Case("slow_bare_lf_head", b"GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\n", "slow"),
    Case("slow_leading_space", b" GET /healthz HTTP/1.1\r\n", "slow"),
    Case("slow_body", b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\ntoken", "slow"),
    Case("slow_healthz", get("/healthz"), "slow"),
    # ------------------------------------------------ other servers
    Case("open_page", get("/"), "open"),
    Case("open_status", get("/api/status"), "open"),
    Case("open_login_post", login("anything"), "open"),
    Case("open_curve", get("/api/jobs/j1/curve"), "open"),
    Case("public_healthz", get("/healthz"), "public"),
    Case("public_metrics", get("/metrics"), "public"),
    Case("public_healthz_token", b"GET /healthz HTTP/1.1\r\nHost: coord.example\r\n" + AUTH + b"\r\n", "public"),
    Case("public_page", get("/"), "public"),
    Case("bug_status", get("/api/status", AUTH), "bug"),
    Case("bug_healthz", get("/healthz"), "bug"),
    Case("capped", get("/healthz"), "capped"),
    # ------------------------------------------------ last: every answer above, counted
    Case("metrics_last", get("/metrics")),
]


CASE = {c.name: c for c in CASES}


# ---------------------------------------------------------------- running the cases


async def _exchange(port: int, case: Case) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    reply = b""
    try:
        if case.request:
            writer.write(case.request)
        if case.mode == "eof":
            writer.write_eof()
        async with asyncio.timeout(15):
            while chunk := await reader.read(1 << 16):
                reply += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        writer.close()
    return reply


async def _run(tmp: Path) -> dict[str, tuple[bytes, str, str]]:
    """Every case's raw answer, with what varies in it: (answer, coordinator id, tmp dir)."""
    h = Harness()
    populate(h, tmp)
    out = {}
    servers: dict[str, HttpServer] = {}
    try:
        for name, (token, host, limits) in VARIANTS.items():
            server = HttpServer(h.c, token, host, 0, limits=limits)
            await server.start()
            servers[name] = server
        servers["bug"].status.body = _broken  # type: ignore[method-assign]
        for case in CASES:
            server = servers[case.variant]
            idle = None
            if case.variant == "capped":  # the one slot is held by a client that sends nothing
                idle = await asyncio.open_connection("127.0.0.1", server.port)
                await _until_connections(server, 1)
            try:
                out[case.name] = await _exchange(server.port, case)
            finally:
                if idle is not None:
                    idle[1].close()
                    await _until_connections(server, 0)
    finally:
        for server in servers.values():
            await server.stop()
    return {k: (v, h.c.coordinator_id, str(tmp)) for k, v in out.items()}


async def _until_connections(server: HttpServer, n: int, timeout_s: float = 10.0) -> None:
    """Until the server holds `n` connections (the capped case's one slot taken or free)."""
    deadline = time.monotonic() + timeout_s
    while len(server._conns) != n:
        assert time.monotonic() < deadline, f"the server holds {len(server._conns)} connections, not {n}"
        await asyncio.sleep(0.005)


async def _broken(prefix: str = "") -> bytes:
    raise RuntimeError("a bug (test_http_golden)")


_WALL_TIME = re.compile(rb"\b\d{10,}(?:\.\d+)?\b|\b\d\.\d+e\+09\b")
_RESOURCES = re.compile(rb'"(?:resources|available)":(\{[^{}]*\})')  # proto maps: any order


def _sorted_map(m: re.Match) -> bytes:
    items = json.loads(m.group(1))
    return m.group(0)[:-len(m.group(1))] + json.dumps(dict(sorted(items.items())), separators=(",", ":")).encode()


def normalise(request: bytes, reply: bytes, coordinator_id: str, tmp: str) -> str:
    """The answer with what varies replaced (and Content-Length too where the body varies:
    the status JSON holds wall-clock times, also when HEAD leaves it out)."""
    head, sep, body = reply.partition(b"\r\n\r\n")
    new = body.replace(coordinator_id.encode(), b"<coordinator_id>").replace(tmp.encode(), b"<tmp>")
    new = _RESOURCES.sub(_sorted_map, _WALL_TIME.sub(b"<t>", new))
    if new != body or request.startswith(b"HEAD /api/status"):
        head = re.sub(rb"(?m)^Content-Length: \d+(?=\r?$)", b"Content-Length: <n>", head)
    return (head + sep + new).decode("latin-1")


def _answers() -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        runs = asyncio.run(_run(Path(tmp)))
    return {name: normalise(CASE[name].request, *run) for name, run in runs.items()}


def record() -> None:
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(_answers(), indent=1, ensure_ascii=True) + "\n")
    print(f"wrote {len(CASES)} answers to {FIXTURE}")


# ---------------------------------------------------------------- the test


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict[str, tuple[bytes, str, str]]:
    return asyncio.run(_run(tmp_path_factory.mktemp("golden")))


def test_every_case_is_recorded():
    recorded = json.loads(FIXTURE.read_text())
    assert sorted(recorded) == sorted(c.name for c in CASES)
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_answer_is_as_recorded(answers, name):
    reply, coordinator_id, tmp = answers[name]
    head, _, body = reply.partition(b"\r\n\r\n")
    length = re.search(rb"(?m)^Content-Length: (\d+)\r?$", head)
    if length is not None and not CASE[name].request.startswith(b"HEAD "):
        assert int(length.group(1)) == len(body)
    expected = json.loads(FIXTURE.read_text())[name]
    assert normalise(CASE[name].request, reply, coordinator_id, tmp) == expected

if __name__ == "__main__":
    sys.exit(record())
