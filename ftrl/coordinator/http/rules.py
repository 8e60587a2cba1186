"""This server's rules for a request head, kept on top of h11 (which parses it).

h11 takes more than this server ever did, and refuses some heads later or with another
status. So every head first passes `check_head`: the same checks, in the same order, with
the same status and message as always (all 400 but where noted):

- the request line is METHOD SP TARGET SP VERSION, the method an RFC 9110 token, the
  version HTTP/d.d (505 unless 1.0 or 1.1), the target a path (origin form) of printable
  ASCII, at most 4096 bytes. h11 takes any version and absolute or `*` targets;
- at most `max_headers` header lines (431), checked before the lines themselves;
- each line NAME ":" VALUE with a token name and no control character (but HT) in the
  value; h11 takes obs-fold continuation lines and controls such as SOH or DEL, and also
  ends lines at a bare LF (here it is a control character: 400);
- an HTTP/1.1 request has exactly one Host.

Then h11 parses the head without the lines whose meaning this server decides after it has
routed the request (`for_h11`): Transfer-Encoding (h11 takes chunked bodies; here any
Transfer-Encoding is 501, or 400 with a Content-Length, after 421/404/405), a
Content-Length `body_length` refuses (h11 takes a list such as "1, 1" and up to 20
digits; h11 refuses other bad ones before routing), and the Host lines of an HTTP/1.0
request that repeats Host (h11 refuses it; here it counts as no Host, as before).
"""

from __future__ import annotations

import re

from ftrl.coordinator.http.messages import HttpError, HttpLimits, Request

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token (methods, header names)
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # controls other than HT
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f-\xff]")
_VERSION = re.compile(rb"HTTP/\d\.\d")
#: headers whose raw values the request keeps (h11 sees them only where noted in for_h11)
RAW = (b"transfer-encoding", b"content-length")


def check_head(head: bytes, limits: HttpLimits) -> list[bytes]:
    """The head's lines (the request line first) if it passes every rule; HttpError if not."""
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
    hosts = 0
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):  # also refuses obs-fold and "Name :"
            raise HttpError(400, "malformed header line")
        if _BAD_VALUE.search(value.strip(b" \t")):
            raise HttpError(400, "control character in a header value")
        hosts += name.lower() == b"host"
    if version == b"HTTP/1.1" and hosts != 1:
        raise HttpError(400, "HTTP/1.1 needs exactly one Host header")
    return lines


def for_h11(lines: list[bytes]) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The head h11 parses, and the (name, value) of the RAW headers and of the headers
    left out of it (see the module docstring), for the request to keep as sent."""
    fields = [(name.lower(), value.strip(b" \t"), line)
              for line in lines[1:] for name, _, value in [line.partition(b":")]]
    lengths = [value for name, value, _ in fields if name == b"content-length"]
    left_out = {b"transfer-encoding"}
    if lengths and not length_ok(lengths):
        left_out.add(b"content-length")
    if lines[0].endswith(b" HTTP/1.0") and sum(name == b"host" for name, _, _ in fields) > 1:
        left_out.add(b"host")
    kept = [line for name, _, line in fields if name not in left_out]
    raw = [(name.decode("ascii"), value) for name, value, _ in fields if name in left_out or name in RAW]
    return b"\r\n".join([lines[0], *kept, b"", b""]), raw


def length_ok(values: list[bytes]) -> bool:
    """Content-Length values this server takes: one number (repeated alike), <= 12 digits."""
    return len(set(values)) == 1 and values[0].isdigit() and len(values[0]) <= 12


def body_length(request: Request, limit: int) -> int:
    """The request body's length from Content-Length (no chunked bodies here)."""
    if "transfer-encoding" in request.headers:
        raise HttpError(501 if "content-length" not in request.headers else 400,
                        "Transfer-Encoding is not supported; send Content-Length")
    values = request.headers.get("content-length")
    if values is None:
        return 0
    if not length_ok(values):
        raise HttpError(400, "bad Content-Length")
    length = int(values[0])
    if length > limit:
        raise HttpError(413, f"a body of {length} bytes; this route takes at most {limit}")
    return length
