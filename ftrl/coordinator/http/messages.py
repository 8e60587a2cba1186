"""What one exchange is made of: the limits on a client, a request, an answer, an error."""

from __future__ import annotations

import http
import urllib.parse
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HttpLimits:
    """Caps on what one client may send or hold (see ftrl.coordinator.http)."""

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


class HeadTooLarge(HttpError):
    """431 for a head over max_head_bytes: the rest of it may still be coming."""


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
