"""The coordinator's HTTP server: `/healthz`, `/api/status`, `/metrics` and a live page at `/`.

It runs on the coordinator's own event loop, written on `asyncio.start_server`: one
request per connection (`Connection: close`), strict HTTP/1.1 parsing with caps on
every part of a request, and bounded work per request.

Limits (HttpLimits): request line + headers <= 16 KiB (431), <= 100 header lines (431),
a body only on `POST /login` and <= 4 KiB (413), the whole request read within 10 s
(408: a client that trickles bytes is cut off), at most 256 connections at once (the
next ones get 503 and are closed at once), the response written within 30 s. Malformed
requests get 400, unknown paths 404, other methods 405. No request can raise out of
the handler: a bug answers 500 and is logged.

Auth: with a cluster token, `/api/*` and `/` need it: `Authorization: Bearer TOKEN`
(API clients, Prometheus), or the session cookie `POST /login` sets (HttpOnly,
SameSite=Strict, an HMAC of a fixed label keyed by the token, never the token). The
page also takes `/#token=TOKEN`: its script posts the fragment (never sent to the
server in the URL) to `/login`. `/healthz` and `/metrics` are open when the server
listens on loopback or with `public_metrics`, else they need the token too. Without a
token (`--insecure`) everything is open. On loopback the Host header must be localhost
or an IP address (421 otherwise), so a DNS-rebound web page cannot read /metrics.

`/api/status` is `ftrl status --json` (the same proto views, ftrl.coordinator.views,
through the same ftrl.wire.convert functions) plus `events` (recent), `deaths` (each
actor's latest death, kept after it restarts) and `curves` (iteration and
episode_return_mean of the newest jobs, last 500 points); `/api/jobs/JOB/curve` is one
job's curve. Building it re-encodes only the records that changed since the last build
(nothing but the heartbeat ages while nothing durable changed), gives the loop back every
5 ms of work, and the body is shared by the requests of the next 0.5 s. At 5,000 nodes
and 10,000 actors: ~15 ms of the loop a request, 0.9 s of CPU for the very first one
(spread at half the loop).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import hmac
import http
import importlib.resources
import ipaddress
import json
import logging
import math
import re
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ftrl.coordinator import views
from ftrl.coordinator.events import RETAINED_EVENTS
from ftrl.coordinator.metrics import CoordinatorMetrics
from ftrl.coordinator.records import ActorRecord, NodeRecord
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.convert import (
    actor_dict,
    cluster_dict,
    event_dict,
    job_dict,
    mesh_dict,
    node_dict,
)
from ftrl.wire.errors import ConfigError
from ftrl.wire.security import is_loopback

if TYPE_CHECKING:
    from ftrl.coordinator.controller import Controller
    from ftrl.coordinator.jobs import JobRecord

log = logging.getLogger(__name__)

COOKIE = "ftrl_session"
_COOKIE_LABEL = b"ftrl-http-session-v1"
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token (methods, header names)
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # controls other than HT
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f-\xff]")
_JOB_ID = re.compile(r"[A-Za-z0-9_.\-]{1,80}")
_VERSION = re.compile(rb"HTTP/\d\.\d")
WRITE_CHUNK = 64 << 10
EVENTS_SHOWN = 200
CURVE_POINTS = 500
CURVE_JOBS = 20  # jobs whose curve /api/status carries (the newest submitted)
_CURVE_READ = 1000
_CURVE_READS = 3  # store reads per job and build at most (the rest comes with the next one)


@dataclass(frozen=True)
class HttpLimits:
    """Caps on what one client may send or hold (defaults documented in the module)."""

    max_head_bytes: int = 16 << 10
    max_headers: int = 100
    max_body_bytes: int = 4 << 10
    request_timeout_s: float = 10.0
    write_timeout_s: float = 30.0
    max_connections: int = 256
    status_cache_s: float = 0.5
    slice_s: float = 0.005  # work between two yields to the loop while building /api/status


class HttpError(Exception):
    """A request answered with an error status (and closed)."""

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message or http.HTTPStatus(status).phrase)
        self.status = status
        self.message = message or http.HTTPStatus(status).phrase


@dataclass
class Request:
    method: str
    target: str
    path: str
    query: str
    version: str
    headers: dict[str, list[bytes]] = field(default_factory=dict)
    body: bytes = b""

    def header(self, name: str) -> bytes | None:
        """The header's value if it was sent exactly once (None if absent or repeated)."""
        values = self.headers.get(name)
        return values[0] if values is not None and len(values) == 1 else None

    def params(self) -> dict[str, str]:
        """Query parameters (the last of repeated ones); 400 on a malformed query."""
        try:
            pairs = urllib.parse.parse_qsl(self.query, keep_blank_values=True, strict_parsing=False,
                                           max_num_fields=20, errors="strict")
        except (ValueError, UnicodeDecodeError):
            raise HttpError(400, "malformed query string") from None
        return dict(pairs)


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


def parse_head(head: bytes, limits: HttpLimits) -> Request:
    """Parse a request line and headers (ending with CRLF CRLF) strictly; HttpError if not."""
    lines = head[:-4].split(b"\r\n") if head.endswith(b"\r\n\r\n") else []
    if not lines or not lines[0]:
        raise HttpError(400, "no request line")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "the request line is not METHOD TARGET VERSION")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise HttpError(400, "bad method")
    if not _VERSION.fullmatch(version):
        raise HttpError(400, "bad HTTP version")
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(505)
    if not target.startswith(b"/") or _BAD_TARGET.search(target) or len(target) > 4096:
        raise HttpError(400, "the target must be a path (origin form)")
    if len(lines) - 1 > limits.max_headers:
        raise HttpError(431, f"more than {limits.max_headers} header lines")
    headers: dict[str, list[bytes]] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):  # also refuses obs-fold and "Name :"
            raise HttpError(400, "malformed header line")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise HttpError(400, "control character in a header value")
        headers.setdefault(name.decode("ascii").lower(), []).append(value)
    text = target.decode("ascii")
    path, _, query = text.partition("?")
    request = Request(method.decode("ascii"), text, urllib.parse.unquote(path), query,
                      version.decode("ascii"), headers)
    if request.version == "HTTP/1.1" and request.header("host") is None:
        raise HttpError(400, "HTTP/1.1 needs exactly one Host header")
    return request


def body_length(request: Request, limit: int) -> int:
    """The request body's length from Content-Length (no chunked bodies here)."""
    if "transfer-encoding" in request.headers:
        raise HttpError(501 if "content-length" not in request.headers else 400,
                        "Transfer-Encoding is not supported; send Content-Length")
    values = request.headers.get("content-length")
    if values is None:
        return 0
    if len(set(values)) != 1 or not values[0].isdigit() or len(values[0]) > 12:
        raise HttpError(400, "bad Content-Length")
    length = int(values[0])
    if length > limit:
        raise HttpError(413, f"a body of {length} bytes; this route takes at most {limit}")
    return length


# ---------------------------------------------------------------- auth


def session_value(token: str) -> str:
    """The login cookie's value: derived from the token, which it never reveals."""
    return hmac.new(token.encode(), _COOKIE_LABEL, hashlib.sha256).hexdigest()


class Auth:
    """Who may see what (see the module docstring)."""

    def __init__(self, token: str | None, open_metrics: bool) -> None:
        self.token = token
        self.open_metrics = open_metrics
        self._bearer = f"Bearer {token}".encode() if token else b""
        self._session = session_value(token).encode() if token else b""

    def bearer_ok(self, request: Request) -> bool:
        got = request.header("authorization") or b""
        scheme, _, value = got.partition(b" ")
        return bool(self.token) and hmac.compare_digest(b"Bearer " + value.strip(), self._bearer) \
            and scheme.lower() == b"bearer"

    def cookie_ok(self, request: Request) -> bool:
        if not self.token:
            return False
        for header in request.headers.get("cookie", [])[:10]:
            for item in header.split(b";")[:50]:
                name, _, value = item.strip().partition(b"=")
                if name == COOKIE.encode() and hmac.compare_digest(value, self._session):
                    return True
        return False

    def token_ok(self, token: str) -> bool:
        return bool(self.token) and hmac.compare_digest(token.encode(), self.token.encode())  # type: ignore[union-attr]

    def allowed(self, route: str, request: Request) -> bool:
        if not self.token or route in ("login", "logout"):
            return True
        if route in ("healthz", "metrics") and self.open_metrics:
            return True
        return self.bearer_ok(request) or self.cookie_ok(request)


# ---------------------------------------------------------------- pages


def _load_page() -> str:
    return importlib.resources.files("ftrl.coordinator").joinpath("status_page.html").read_text("utf-8")


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>ftrl coordinator: log in</title>
<style>
body{font:15px system-ui,sans-serif;margin:4em auto;max-width:28em;color:#222}
input{font:inherit;padding:.4em;width:100%;box-sizing:border-box;margin:.5em 0}
button{font:inherit;padding:.4em 1.2em}.err{color:#b00}
</style></head><body>
<h1>ftrl coordinator</h1>
<p>This page needs the cluster token (the coordinator's <code>--token-file</code>, or the
token file it names in its log).</p>
<p class="err" id="err">__ERROR__</p>
<form method="post" action="/login">
<label>Cluster token <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Log in</button></form>
<script>
(function () {
  var m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, "", location.pathname + location.search);
  fetch("/login", {method: "POST", credentials: "same-origin", redirect: "manual",
    headers: {"Content-Type": "application/x-www-form-urlencoded"},
    body: "token=" + m[1]}).then(function () { location.replace("/"); },
    function () { document.getElementById("err").textContent = "login failed"; });
})();
</script></body></html>
"""


def _csp(page: str) -> str:
    """A Content-Security-Policy allowing exactly the page's own inline style and script."""
    def hashes(tag: str) -> str:
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'"
                        for b in blocks)

    return (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
            "connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; "
            "frame-ancestors 'none'")


def _sanitize(value: Any, depth: int = 0) -> Any:
    """JSON-safe: non-finite floats become null (browsers refuse NaN in JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 64:
        return None
    if isinstance(value, dict):
        return {k: _sanitize(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sanitize(v, depth + 1) for v in value]
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, allow_nan=False, separators=(",", ":"))


# ---------------------------------------------------------------- status


@dataclass
class _Curve:
    submitted_at: float
    seq: int
    last: int  # the newest iteration read
    iterations: deque = field(default_factory=lambda: deque(maxlen=CURVE_POINTS))
    returns: deque = field(default_factory=lambda: deque(maxlen=CURVE_POINTS))


class Curves:
    """Per-job return curves from the job results store, read incrementally (each row
    once) and kept to the last CURVE_POINTS points."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self._curves: dict[str, _Curve] = {}

    def get(self, job: JobRecord) -> dict[str, list]:
        cur = self._curves.get(job.job_id)
        if cur is None or cur.submitted_at != job.submitted_at:
            cur = _Curve(job.submitted_at, -1, max(0, job.iteration - CURVE_POINTS))
            self._curves[job.job_id] = cur
        if cur.seq != job.seq:
            cur.seq = job.seq
            for _ in range(_CURVE_READS):
                rows = self.c.store.results(job.job_id, cur.last, _CURVE_READ)
                for iteration, row in rows:
                    cur.iterations.append(iteration)
                    cur.returns.append(self._return(row))
                    cur.last = iteration
                if len(rows) < _CURVE_READ:
                    break
                cur.seq = -1  # more to read next time
        return {"iteration": list(cur.iterations), "episode_return_mean": list(cur.returns)}

    @staticmethod
    def _return(row: bytes) -> float | None:
        try:
            value = codec.decode(row, codec.SMALL_LIMITS)
        except Exception:
            return None
        value = value.get("episode_return_mean") if isinstance(value, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return None
        return float(value)

    def prune(self) -> None:
        for job_id in [j for j in self._curves if j not in self.c.jobs.jobs]:
            del self._curves[job_id]


def _getter(cls: type, skip: frozenset[str]) -> attrgetter:
    """All of a record type's dataclass fields but `skip`, so a field added later is in
    the key by itself (tests/unit/test_http.py checks that no field shown is missing)."""
    return attrgetter(*[f.name for f in dataclasses.fields(cls) if f.name not in skip])


#: Every field of the actor record (its spec is never changed in place, so the same spec
#: object means the same spec): while these stay the same, so does the actor's JSON.
_actor_key = _getter(ActorRecord, frozenset())
#: The node's plain fields; its containers are copied in _node_key, and its heartbeat
#: age (which changes all the time) is spliced into the JSON on every build.
_node_fields = _getter(NodeRecord, frozenset(
    {"last_heartbeat", "actors", "used", "resources", "pending_stops", "failure_times"}))


def _node_key(n: NodeRecord) -> tuple:
    """Every field of the node that `node_dict(n.to_proto(now))` may show, but the age."""
    return (_node_fields(n), frozenset(n.actors), tuple(n.used.items()), tuple(n.resources.items()))


_AGE = '"last_heartbeat_age_s":'


@dataclass
class _Records:
    """The part of `/api/status` that changes only with the durable state or events: made
    again when the signature changes or `FULL_CHECK_S` passed, reused between."""

    signature: tuple
    made_at: float
    nodes: list[NodeRecord]  # in order; their heartbeat ages go between the pieces
    node_pieces: list[str]
    actors: bytes
    jobs: bytes
    tail: bytes  # events, deaths, curves


class StatusBuilder:
    """Builds `/api/status` (see the module docstring).

    Each node's and actor's JSON is made by the same proto view and convert function as
    `ftrl status --json`, and kept with a key of every field it shows, so a build
    re-encodes only the records that changed. While nothing durable changed (the store's
    commit count, the event seq and the record counts are the same) the records part is
    reused, and only the heartbeat ages and learner groups are made again; every
    FULL_CHECK_S all records are checked again in the background, at half speed. The
    loop gets control back every `slice_s` of work; concurrent requests share one
    build, whose body is reused for `status_cache_s`."""

    FULL_CHECK_S = 60.0

    def __init__(self, controller: Controller, limits: HttpLimits) -> None:
        self.c = controller
        self.limits = limits
        self.curves = Curves(controller)
        self._cached: tuple[float, bytes] | None = None
        self._building: asyncio.Task | None = None
        self._checking: asyncio.Task | None = None
        self._records: _Records | None = None
        self._actors: dict[str, tuple[ActorRecord, tuple, str]] = {}  # name -> (record, key, JSON)
        self._nodes: dict[str, tuple[NodeRecord, tuple, str, str]] = {}  # id -> (record, key, JSON around the age)
        self._slice_started = 0.0
        self._encoded = 0  # records encoded since the last pause
        self._background = False  # a check nobody waits for: it takes at most half the loop

    async def body(self, prefix: str = "") -> bytes:
        if prefix:
            return await self._build(prefix)
        loop = asyncio.get_running_loop()
        if self._cached is not None and loop.time() - self._cached[0] < self.limits.status_cache_s:
            return self._cached[1]
        if self._building is None or self._building.done():
            self._building = asyncio.create_task(self._build_cached())
        return await asyncio.shield(self._building)

    async def _build_cached(self) -> bytes:
        body = await self._build("")
        self._cached = (asyncio.get_running_loop().time(), body)
        return body

    async def close(self) -> None:
        for task in (self._building, self._checking):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _pause(self) -> None:
        """Yield to the loop if this slice of work took longer than slice_s. A slice that
        encoded records (a first build, or many changes) is followed by a pause as long,
        so a long build takes at most half the loop and heartbeats keep their share."""
        now = time.perf_counter()
        if now - self._slice_started > self.limits.slice_s:
            await asyncio.sleep(self.limits.slice_s if self._encoded > 16 or self._background else 0)
            self._encoded = 0
            self._slice_started = time.perf_counter()

    def _signature(self) -> tuple:
        c = self.c
        commits = getattr(c.store, "commits", None)
        connected = sum(1 for n in c.nodes.values() if n.connected)  # the one shown field not stored
        return (commits, c.events.seq, len(c.actors), len(c.nodes), len(c.jobs.jobs), connected)

    async def _build(self, prefix: str) -> bytes:
        c = self.c
        self._slice_started = time.perf_counter()
        loop_now = asyncio.get_running_loop().time()
        full = not prefix
        signature = self._signature()
        records = self._records
        if not full or records is None or records.signature != signature or signature[0] is None:
            records = await self._make_records(prefix, signature, loop_now)
            if full:
                self._records = records
        elif loop_now - records.made_at > self.FULL_CHECK_S and (
                self._checking is None or self._checking.done()):
            # Nothing durable changed. Every field shown changes with a durable write or
            # is in the signature, but check every record now and then all the same, in
            # the background (for the next request: this one does not wait for it).
            self._checking = asyncio.create_task(self._recheck(records))
        now = c.clock()
        ages = []
        for i, n in enumerate(records.nodes):
            ages.append(repr(round(max(0.0, now - n.last_heartbeat), 3)))
            if i % 256 == 255:
                await self._pause()
        nodes = "".join(chain.from_iterable(zip(records.node_pieces, ages, strict=False))) + records.node_pieces[-1]
        meshes = _dumps([mesh_dict(v) for v in views.list_meshes(c).meshes if v.group.startswith(prefix)])
        return b"".join((b'{"cluster":', _dumps(cluster_dict(c.cluster_info())).encode(), b',"nodes":',
                         nodes.encode(), b',"actors":', records.actors, b',"learner_groups":', meshes.encode(),
                         b',"jobs":', records.jobs, records.tail, b"}"))

    async def _recheck(self, old: _Records) -> None:
        self._background = True
        try:
            fresh = await self._make_records("", old.signature, asyncio.get_running_loop().time())
        except Exception:
            log.exception("checking the status records failed")
            return
        finally:
            self._background = False
        if self._records is old:  # not replaced by a newer build meanwhile
            self._records = fresh

    async def _make_records(self, prefix: str, signature: tuple, loop_now: float) -> _Records:
        c = self.c
        full = not prefix
        now = c.clock()
        old_nodes, new_nodes = self._nodes, {}
        node_recs = views.node_records(c)
        pieces, before = [], "["
        for i, n in enumerate(node_recs):
            key = _node_key(n)
            hit = old_nodes.get(n.node_id)
            if hit is None or hit[0] is not n or hit[1] != key:
                d = node_dict(n.to_proto(now))
                d["last_heartbeat_age_s"] = 0
                head, _, tail = _dumps(d).partition(_AGE + "0")
                hit = (n, key, head + _AGE, tail)
                self._encoded += 1
            new_nodes[n.node_id] = hit
            pieces.append(before + hit[2])
            before = hit[3] + ","
            if i % 32 == 31:
                await self._pause()
        pieces.append((before[:-1] if node_recs else before) + "]")
        old_actors, new_actors = self._actors, {}
        actor_items = views.actor_items(c, prefix)
        parts = []
        for i, (name, r) in enumerate(actor_items):
            key = _actor_key(r)
            hit = old_actors.get(name)
            if hit is None or hit[0] is not r or hit[1] != key:
                hit = (r, key, _dumps(actor_dict(r.to_proto())))
                self._encoded += 1
            new_actors[name] = hit
            parts.append(hit[2])
            if i % 32 == 31:
                await self._pause()
        actors = ("[" + ",".join(parts) + "]").encode()
        if full:  # the caches now hold exactly the records there are
            self._nodes, self._actors = new_nodes, new_actors
        job_records = views.job_records(c)
        all_actors = actor_items if full else views.actor_items(c)
        jobs = []
        for info in views.job_infos(c, job_records, all_actors):
            jobs.append(_dumps(_sanitize(job_dict(info))))
            if len(jobs) % 32 == 0:
                await self._pause()
        recent = c.events.recent(RETAINED_EVENTS)
        events = _dumps([event_dict(e) for e in recent[-EVENTS_SHOWN:]])
        names = c.actors if full else {n for n, _ in actor_items}
        deaths: dict[str, dict[str, Any]] = {}
        for e in reversed(recent):
            if e.type == pb.EVENT_DIED and e.actor in names and e.actor not in deaths:
                deaths[e.actor] = {"reason": e.message, "incarnation": e.incarnation, "at": e.at}
        await self._pause()
        curves: dict[str, Any] = {}
        for job in sorted(job_records, key=lambda j: j.submitted_at)[-CURVE_JOBS:]:
            curves[job.job_id] = _sanitize(self.curves.get(job))
            await self._pause()
        self.curves.prune()
        tail = f',"events":{events},"deaths":{_dumps(deaths)},"curves":{_dumps(curves)}'
        return _Records(signature, loop_now, node_recs, pieces, actors,
                        ("[" + ",".join(jobs) + "]").encode(), tail.encode())


# ---------------------------------------------------------------- the server

#: path -> (route name, methods)
ROUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "/": ("page", ("GET", "HEAD")),
    "/healthz": ("healthz", ("GET", "HEAD")),
    "/api/status": ("status", ("GET", "HEAD")),
    "/metrics": ("metrics", ("GET", "HEAD")),
    "/login": ("login", ("GET", "HEAD", "POST")),
    "/logout": ("logout", ("POST",)),
}
_CURVE_PATH = re.compile(r"/api/jobs/([^/]+)/curve")
_SECURITY_HEADERS = [("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-store"),
                     ("Referrer-Policy", "no-referrer"), ("X-Frame-Options", "DENY")]


def _local_host(host: bytes | None) -> bool:
    """A Host header a loopback server accepts: none (HTTP/1.0), localhost or an IP
    address, with any port. A DNS name is refused: a web page whose name was rebound to
    127.0.0.1 must not read the open /metrics from a browser on this machine."""
    if host is None:
        return True
    name = host.decode("latin-1").lower()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def route_of(path: str) -> tuple[str, tuple[str, ...]]:
    if path in ROUTES:
        return ROUTES[path]
    if _CURVE_PATH.fullmatch(path):
        return "curve", ("GET", "HEAD")
    raise HttpError(404, f"no such page; try / /api/status /metrics /healthz (got {path[:100]})")


class HttpServer:
    """The HTTP server of one coordinator; start() binds, stop() closes every connection."""

    def __init__(self, controller: Controller, token: str | None, host: str = "127.0.0.1",
                 port: int = 0, public_metrics: bool = False, metrics: CoordinatorMetrics | None = None,
                 limits: HttpLimits | None = None) -> None:
        self.c = controller
        self.host = host
        self.port = port
        self.limits = limits or HttpLimits()
        self.metrics = metrics or CoordinatorMetrics(controller)
        self._loopback = is_loopback(host)
        self.auth = Auth(token, public_metrics or self._loopback)
        self.status = StatusBuilder(controller, self.limits)
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self.refused = 0  # connections turned away at the cap
        self._refusing = 0  # of those, the ones still open (their 503 going out)
        page = _load_page()
        self._page = page.encode()
        self._page_csp = _csp(page)
        self._login_csp = _csp(LOGIN_PAGE)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def start(self) -> int:
        """Listen; ConfigError naming --http-port when the port cannot be had."""
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--http-port {self.port} is not a port number (0..65535, 0 = any free one)")
        try:
            self._server = await asyncio.start_server(
                self._on_connect, self.host, self.port, limit=self.limits.max_head_bytes,
                backlog=self.limits.max_connections)
        except (OSError, OverflowError) as e:
            raise ConfigError(
                f"--http-port {self.port}: cannot listen on {self.host}:{self.port} "
                f"({e.strerror or e}); choose another port (0 = any free one)") from None
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._conns.values()):  # their reads and writes fail: handlers return
            writer.transport.abort()
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=1.0)
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=1.0)
        await self.status.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()

    # ------------------------------------------------------------ connections

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._conns) >= self.limits.max_connections:
            self._refuse(writer)
            return
        task = asyncio.current_task()
        assert task is not None
        self._conns[task] = writer
        answered = False
        try:
            answered = await self._serve(reader, writer)
        except asyncio.CancelledError:
            # stop() cancelled this connection: end here. (Re-raising would only make
            # asyncio's stream callback log the cancellation as an error.)
            pass
        except Exception:  # never out of the handler
            log.exception("HTTP connection failed")
        finally:
            del self._conns[task]
            if answered:
                writer.transport.close()  # its answer is written: a clean close
            else:
                writer.transport.abort()  # nothing (more) to say, or a client that does not read

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        """Over the connection cap: 503 and close, with no task and no read. The socket
        stays open one second so the client can read the 503 (not a reset), at most
        max_connections such sockets at once (beyond: closed at once)."""
        self.refused += 1
        self.metrics.count_request("refused", 503)
        transport = writer.transport
        if self._refusing >= self.limits.max_connections:
            transport.abort()
            return
        self._refusing += 1

        def done() -> None:
            self._refusing -= 1
            transport.abort()

        try:
            transport.pause_reading()
            transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                            b"Content-Length: 21\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
                            b"too many connections\n")
            if transport.can_write_eof():
                transport.write_eof()
        except Exception:
            pass
        asyncio.get_running_loop().call_later(1.0, done)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request and answer it; True once the whole answer is written."""
        route, request = "bad", None
        linger = False
        try:
            async with asyncio.timeout(self.limits.request_timeout_s):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    linger = True
                    raise HttpError(431, f"request line and headers over {self.limits.max_head_bytes} bytes") from None
                except asyncio.IncompleteReadError as e:
                    if not e.partial:
                        return False  # connected and went away
                    raise HttpError(400, "the request ended before its headers did") from None
                request = parse_head(head, self.limits)
                if self._loopback and not _local_host(request.header("host")):
                    raise HttpError(421, "on loopback the Host must be localhost or an IP address")
                route, methods = route_of(request.path)
                if request.method not in methods:
                    raise HttpError(405, f"{request.path} takes {', '.join(methods)}")
                limit = self.limits.max_body_bytes if (route, request.method) == ("login", "POST") else 0
                linger = True
                length = body_length(request, limit)
                linger = False
                if length:
                    request.body = await reader.readexactly(length)
            response = await self._respond(route, request)
        except TimeoutError:
            response = self._error(408, "the request was not received in time")
            linger = False
        except HttpError as e:
            response = self._error(e.status, e.message, request)
            if e.status == 405 and request is not None:
                response.headers.append(("Allow", ", ".join(route_of(request.path)[1])))
            if request is not None and not request.body and (
                    "content-length" in request.headers or "transfer-encoding" in request.headers):
                linger = True  # a body we did not read may follow
        except (ConnectionError, asyncio.IncompleteReadError):
            return False
        except Exception:  # a bug: say so, keep serving
            log.exception("HTTP %s failed", route)
            response = self._error(500, "internal error (logged by the coordinator)")
        self.metrics.count_request(route, response.status)
        sent = await self._send(writer, response, head_only=request is not None and request.method == "HEAD")
        if sent and linger:  # let the client see the answer before the unread rest of its request
            await self._drain_input(reader)
        return sent

    async def _send(self, writer: asyncio.StreamWriter, r: Response, head_only: bool = False) -> bool:
        """Write the response within write_timeout_s; False if the client did not take it."""
        lines = [f"HTTP/1.1 {r.status} {http.HTTPStatus(r.status).phrase}",
                 f"Content-Type: {r.content_type}", f"Content-Length: {len(r.body)}",
                 "Connection: close", "Server: ftrl", *(f"{k}: {v}" for k, v in _SECURITY_HEADERS),
                 *(f"{k}: {v}" for k, v in r.headers)]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            async with asyncio.timeout(self.limits.write_timeout_s):
                writer.write(head)
                if not head_only:
                    view = memoryview(r.body)
                    for i in range(0, len(view), WRITE_CHUNK):  # bounded buffering per client
                        writer.write(view[i:i + WRITE_CHUNK])
                        await writer.drain()
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
        except (ConnectionError, TimeoutError):
            return False
        return True

    @staticmethod
    async def _drain_input(reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                for _ in range(16):
                    if not await reader.read(16 << 10):
                        break

    # ------------------------------------------------------------ responses

    def _error(self, status: int, message: str, request: Request | None = None) -> Response:
        if request is not None and request.path == "/" and status == 401:
            return self._login_page("")
        headers = [("WWW-Authenticate", 'Bearer realm="ftrl"')] if status == 401 else []
        return Response(status, _dumps({"error": message, "status": status}).encode() + b"\n",
                        "application/json", headers)

    async def _respond(self, route: str, request: Request) -> Response:
        if not self.auth.allowed(route, request):
            raise HttpError(401, "this needs the cluster token: Authorization: Bearer TOKEN, or log in at /")
        if route == "healthz":
            return Response(200, b"ok\n")
        if route == "status":
            prefix = request.params().get("prefix", "")
            if len(prefix) > 200:
                raise HttpError(400, "prefix is over 200 characters")
            return Response(200, await self.status.body(prefix), "application/json")
        if route == "curve":
            match = _CURVE_PATH.fullmatch(request.path)
            job_id = match.group(1) if match else ""
            job = self.c.jobs.jobs.get(job_id) if _JOB_ID.fullmatch(job_id) else None
            if job is None:
                raise HttpError(404, f"no job {job_id[:100]!r}")
            curve = _sanitize(self.status.curves.get(job))
            return Response(200, _dumps({"job_id": job_id, **curve}).encode(), "application/json")
        if route == "metrics":
            accept = (request.header("accept") or b"").decode("latin-1")
            body, content_type = self.metrics.render(accept)
            return Response(200, body, content_type)
        if route == "page":
            return Response(200, self._page, "text/html; charset=utf-8",
                            [("Content-Security-Policy", self._page_csp)])
        if route == "login":
            return self._login(request)
        if route == "logout":
            return Response(303, b"", headers=[("Location", "/"), (
                "Set-Cookie", f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")])
        raise HttpError(404)

    def _login_page(self, error: str) -> Response:
        """The login form (401); `error` is a fixed text, never anything the client sent."""
        body = LOGIN_PAGE.replace("__ERROR__", error).encode()
        return Response(401, body, "text/html; charset=utf-8", [("Content-Security-Policy", self._login_csp)])

    def _login(self, request: Request) -> Response:
        if request.method != "POST" or not self.auth.token:
            return Response(303, b"", headers=[("Location", "/")])
        origin = request.header("origin")
        host = request.header("host")
        if origin is not None and origin != b"null" and host is not None and \
                urllib.parse.urlsplit(origin.decode("latin-1")).netloc.encode("latin-1") != host:
            raise HttpError(403, "a login from another site")
        try:
            form = urllib.parse.parse_qs(request.body.decode("utf-8"), max_num_fields=5, strict_parsing=True)
            token = form["token"][0]
        except (ValueError, KeyError, IndexError, UnicodeDecodeError):
            token = ""
        if not self.auth.token_ok(token.strip()):
            return self._login_page("That is not the cluster token.")
        cookie = f"{COOKIE}={session_value(self.auth.token)}; Path=/; HttpOnly; SameSite=Strict"
        return Response(303, b"", headers=[("Location", "/"), ("Set-Cookie", cookie)])

