"""The coordinator's HTTP server: connections, their limits, routing and answers.

It runs on the coordinator's own event loop, on `asyncio.start_server`: one request per
connection (`Connection: close`), read by ftrl.coordinator.http.reader (h11, under this
server's rules), with caps on every part of a request and bounded work per request (the
limits are in ftrl.coordinator.http).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import re
import urllib.parse
from typing import TYPE_CHECKING

from ftrl.coordinator.http import pages, rules
from ftrl.coordinator.http.auth import COOKIE, Auth, local_host, session_value
from ftrl.coordinator.http.messages import HeadTooLarge, HttpError, HttpLimits, Request, Response
from ftrl.coordinator.http.reader import ClientGone, RequestReader
from ftrl.coordinator.http.status import StatusBuilder, dumps, sanitize
from ftrl.coordinator.metrics import CoordinatorMetrics
from ftrl.wire.errors import ConfigError
from ftrl.wire.security import is_loopback

if TYPE_CHECKING:
    from ftrl.coordinator.controller import Controller

log = logging.getLogger(__name__)

WRITE_CHUNK = 64 << 10
_JOB_ID = re.compile(r"[A-Za-z0-9_.\-]{1,80}")

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
        page = pages.load_page()
        self._page = page.encode()
        self._page_csp = pages.csp(page)
        self._login_csp = pages.csp(pages.LOGIN_PAGE)

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
        incoming = RequestReader(reader, self.limits)
        try:
            async with asyncio.timeout(self.limits.request_timeout_s):
                request = await incoming.head()
                if request is None:
                    return False  # connected and went away
                if self._loopback and not local_host(request.header("host")):
                    raise HttpError(421, "on loopback the Host must be localhost or an IP address")
                route, methods = route_of(request.path)
                if request.method not in methods:
                    raise HttpError(405, f"{request.path} takes {', '.join(methods)}")
                limit = self.limits.max_body_bytes if (route, request.method) == ("login", "POST") else 0
                linger = True
                length = rules.body_length(request, limit)
                linger = False
                if length:
                    request.body = await incoming.body()
            response = await self._respond(route, request)
        except TimeoutError:
            response = self._error(408, "the request was not received in time")
            linger = False
        except HttpError as e:
            response = self._error(e.status, e.message, request)
            if e.status == 405 and request is not None:
                response.headers.append(("Allow", ", ".join(route_of(request.path)[1])))
            if isinstance(e, HeadTooLarge) or (request is not None and not request.body and (
                    "content-length" in request.headers or "transfer-encoding" in request.headers)):
                linger = True  # a body (or the rest of the head) we did not read may follow
        except (ConnectionError, ClientGone):
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
        return Response(status, dumps({"error": message, "status": status}).encode() + b"\n",
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
            curve = sanitize(self.status.curves.get(job))
            return Response(200, dumps({"job_id": job_id, **curve}).encode(), "application/json")
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
        body = pages.LOGIN_PAGE.replace("__ERROR__", error).encode()
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

