"""Who may see what: the cluster token, the login session cookie, the Host check.

With a cluster token, `/api/*` and `/` need it: `Authorization: Bearer TOKEN` (API
clients, Prometheus), or the session cookie `POST /login` sets (HttpOnly,
SameSite=Strict, an HMAC of a fixed label keyed by the token, never the token).
`/healthz` and `/metrics` are open when the server listens on loopback or with
`public_metrics`, else they need the token too. Without a token (`--insecure`)
everything is open. On loopback the Host header must be localhost or an IP address
(421 otherwise), so a DNS-rebound web page cannot read /metrics.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

from ftrl.coordinator.http.messages import Request

COOKIE = "ftrl_session"
_COOKIE_LABEL = b"ftrl-http-session-v1"


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


def local_host(host: bytes | None) -> bool:
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
