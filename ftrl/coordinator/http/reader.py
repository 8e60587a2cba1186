"""Reading one request off a connection: its head, then (once routed) its body.

The head ends at the first CRLF CRLF, found within `max_head_bytes` (else 431) by the
stream reader; h11 parses it (`parse_head`, under ftrl.coordinator.http.rules: what h11
refuses answers its status hint, 400 or 431) and frames the body by its Content-Length.
h11's own cap on an unfinished head (`max_incomplete_event_size`) is the same bound.
"""

from __future__ import annotations

import asyncio
import urllib.parse

import h11

from ftrl.coordinator.http import rules
from ftrl.coordinator.http.messages import HeadTooLarge, HttpError, HttpLimits, Request

READ_CHUNK = 16 << 10


class ClientGone(Exception):
    """The client closed its side before its request was whole: nothing to answer."""


def parse_head(conn: h11.Connection, head: bytes, limits: HttpLimits) -> Request:
    """The request of a whole head (through its CRLF CRLF), parsed by h11 on `conn`;
    HttpError for a head this server refuses (see ftrl.coordinator.http.rules)."""
    try:
        rules.check_raw(head)
        conn.receive_data(rules.for_h11(head))
        event = conn.next_event()
    except h11.RemoteProtocolError as e:
        raise rules.h11_refusal(head, limits, e) from None
    except HttpError as e:
        raise rules.refused(head, limits, e.status, e.message) from None
    if not isinstance(event, h11.Request):  # a whole head is a request or a refusal
        raise HttpError(400, "malformed request")
    rules.check_request(event, limits)
    target = event.target.decode("ascii")
    path, _, query = target.partition("?")
    return Request(event.method.decode("ascii"), target, urllib.parse.unquote(path), query,
                   "HTTP/" + event.http_version.decode("ascii"), rules.fields(event))


class RequestReader:
    """One request of one connection (one request per connection)."""

    def __init__(self, reader: asyncio.StreamReader, limits: HttpLimits) -> None:
        self._reader = reader
        self._limits = limits
        # the head's cap, counting its final CRLF CRLF (the stream reader's limit does not)
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
        return parse_head(self._h11, head, self._limits)

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
