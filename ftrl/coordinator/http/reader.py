"""Reading one request off a connection: its head, then (once routed) its body.

The head ends at the first CRLF CRLF, found within `max_head_bytes` (else 431) by the
stream reader before h11 sees a byte, as before: h11 would also end a head at a bare LF,
and caps only a head that comes in pieces (`max_incomplete_event_size`, here the same
bound: its 431 can never come first). The head passes ftrl.coordinator.http.rules, then
h11 parses it into the request; h11 frames the body by its Content-Length.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse

import h11

from ftrl.coordinator.http import rules
from ftrl.coordinator.http.messages import HeadTooLarge, HttpError, HttpLimits, Request

log = logging.getLogger(__name__)

READ_CHUNK = 16 << 10


class ClientGone(Exception):
    """The client closed its side before its request was whole: nothing to answer."""


class RequestReader:
    """One request of one connection (one request per connection)."""

    def __init__(self, reader: asyncio.StreamReader, limits: HttpLimits) -> None:
        self._reader = reader
        self._limits = limits
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes + 4)

    async def head(self) -> Request | None:
        """The request line and headers; None if the client left without sending a byte.
        HttpError for a head this server refuses (HeadTooLarge: more may be coming)."""
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise HeadTooLarge(431, f"request line and headers over {self._limits.max_head_bytes} bytes") from None
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                return None  # connected and went away
            raise HttpError(400, "the request ended before its headers did") from None
        lines = rules.check_head(head, self._limits)
        kept, raw = rules.for_h11(lines)
        self._h11.receive_data(kept)
        try:
            event = self._h11.next_event()
        except h11.RemoteProtocolError as e:  # the rules let through only heads h11 takes
            log.error("h11 refused a request head the rules took (%s): %r", e, head[:300])
            raise HttpError(400, "malformed request") from None
        if not isinstance(event, h11.Request):
            raise HttpError(400, "malformed request")
        as_sent = {name for name, _ in raw}
        headers: dict[str, list[bytes]] = {}
        for name, value in event.headers:
            if (key := name.decode("ascii")) not in as_sent:
                headers.setdefault(key, []).append(value)
        for name, value in raw:
            headers.setdefault(name, []).append(value)
        target = event.target.decode("ascii")
        path, _, query = target.partition("?")
        return Request(event.method.decode("ascii"), target, urllib.parse.unquote(path), query,
                       "HTTP/" + event.http_version.decode("ascii"), headers)

    async def body(self) -> bytes:
        """The body, framed by h11 (call it only once rules.body_length took its length);
        ClientGone if the client closes before it is whole."""
        parts = []
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError:
                raise ClientGone from None
            if event is h11.NEED_DATA:
                self._h11.receive_data(await self._reader.read(READ_CHUNK))  # b"": the end
            elif isinstance(event, h11.Data):
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise ClientGone
