"""The coordinator's HTTP server: `/healthz`, `/api/status`, `/metrics` and a live page at `/`.

One module a job: `server` (connections, limits, routing, answers), `reader` (one
request off a connection, parsed and framed by h11), `rules` (what this server refuses
in a head, beyond h11), `auth` (token, session cookie, Host check), `status` (the
`/api/status` body and the return curves), `pages` (the status page, the login form,
their Content-Security-Policy), `messages` (limits, request, answer, error).

Limits (HttpLimits): request line + headers <= 16 KiB (431), <= 100 header lines (431),
a body only on `POST /login` and <= 4 KiB (413), the whole request read within 10 s
(408: a client that trickles bytes is cut off), at most 256 connections at once (the
next ones get 503 and are closed at once), the response written within 30 s. Malformed
requests get 400, unknown paths 404, other methods 405, a DNS name in Host on loopback
421. No request can raise out of the handler: a bug answers 500 and is logged.
"""

from ftrl.coordinator.http.auth import COOKIE, Auth, session_value
from ftrl.coordinator.http.messages import HttpError, HttpLimits, Request, Response
from ftrl.coordinator.http.server import ROUTES, HttpServer, route_of
from ftrl.coordinator.http.status import Curves, StatusBuilder
from ftrl.coordinator.http.status import actor_key as _actor_key  # the names tests use
from ftrl.coordinator.http.status import node_key as _node_key

__all__ = ["COOKIE", "ROUTES", "Auth", "Curves", "HttpError", "HttpLimits", "HttpServer", "Request",
           "Response", "StatusBuilder", "_actor_key", "_node_key", "route_of", "session_value"]
