"""What this server decides about a request head beyond h11, which parses it.

h11 parses the request line and the header lines (ftrl.coordinator.http.reader feeds it
the head) and refuses what it cannot parse: a bad request line (method, target of visible
ASCII, HTTP/d.d), a bad header line (token name, colon, value), an HTTP/1.1 request
without Host. What h11 takes and this server refuses is checked on h11's event,
`check_request` (400 but where noted):

- the version: h11 takes any HTTP/d.d; here 1.0 and 1.1 only (505);
- the target: a path (origin form), <= 4096 bytes (h11 takes `*` and absolute forms);
- at most `max_headers` header lines (431), counted in h11's header list;
- no control character in a header value (h11 refuses NUL, CR, LF, VT, FF; not SOH..BS,
  SO..US, DEL);
- an HTTP/1.1 request has exactly one Host (h11 refuses none; more than one: below).

Where h11 would answer a head otherwise than this server always has (the statuses in
tests/fixtures/http_responses), it is kept from deciding:

- Two raw checks before h11 (`check_raw`), for what h11 hides once parsed: a bare LF
  ending a line (h11 takes it, as RFC 9112 allows, and would answer the request it
  makes; here it is a 400 as always) and obs-fold, a header line that starts with a
  space or tab (h11 joins it to the line above; here a 400, as RFC 9112 allows too).
- Lines h11 is shown under another name (`for_h11`: the prefix HIDDEN, drawn at random
  so that no client sends it), which it parses as plain fields (`fields` gives them their
  names back): every Transfer-Encoding (h11 refuses all but "chunked" before routing;
  here any is a 501, or a 400 with a Content-Length, after 421/404/405: `body_length`);
  every Content-Length unless they all carry one number of <= 12 digits (h11 refuses a
  bad one before routing and reads a list "1, 1" as 1; here both are a 400 after
  routing); the Host and Content-Length lines after the first (h11 refuses a repeated
  Host in any version, as RFC 9112 says; here an HTTP/1.0 request may repeat it and then
  has no Host, as always). So h11 frames a body only by a Content-Length `body_length`
  takes.
- When h11 (or `check_raw`) refuses a head, the last word of its request line is looked
  at for an HTTP version other than 1.0 and 1.1 (505) and its lines are counted (431)
  before the refusal is answered (`refused`): h11 stops at the first bad byte, and these
  two statuses ranked before a 400 for a bad line here.

Error texts from h11 (its RemoteProtocolError, less the request bytes it quotes): "no
request line received", "illegal request line", "illegal header line", "Missing
mandatory Host: header" (and any other h11 may raise); every other text is this server's.
"""

from __future__ import annotations

import re
import secrets

import h11

from ftrl.coordinator.http.messages import HttpError, HttpLimits, Request

_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # controls other than HT
_VERSION = re.compile(rb"HTTP/\d\.\d")
_QUOTED = re.compile(r": (?:bytearray\()?b['\"].*", re.DOTALL)  # h11 quotes the bad line
#: the header lines for_h11 may rename (a name, then the colon at once, as h11 reads a field)
_RENAMED = re.compile(rb"\r\n((?i:host|content-length|transfer-encoding)):(.*?)(?=\r\n)")
#: the name prefix of the lines h11 is shown renamed (lower case, as h11 gives names back)
HIDDEN = f"ftrl-{secrets.token_hex(6)}-".encode()


def check_raw(head: bytes) -> None:
    """The two checks on the raw head (the module docstring says why); HttpError 400.
    Byte counts and substring searches, not regexes: this runs on the coordinator's loop
    for every request, before auth."""
    if head.count(b"\n") != head.count(b"\r\n"):
        raise HttpError(400, "a line ends in a bare LF; lines end in CRLF")
    if b"\r\n " in head or b"\r\n\t" in head:
        raise HttpError(400, "malformed header line")  # obs-fold


def for_h11(head: bytes) -> bytes:
    """The head as h11 sees it: the lines in the module docstring renamed to HIDDEN + name."""
    matches = list(_RENAMED.finditer(head))
    if not matches:
        return head
    lengths = [m.group(2).strip(b" \t") for m in matches if m.group(1).lower() == b"content-length"]
    plain = length_ok(lengths) if lengths else True
    seen: set[bytes] = set()
    parts, last = [], 0
    for m in matches:
        name = m.group(1).lower()
        first = name not in seen
        seen.add(name)
        if (name == b"host" and first) or (name == b"content-length" and first and plain):
            continue  # shown as it is
        parts += [head[last : m.start(1)], HIDDEN]
        last = m.start(1)
    return b"".join([*parts, head[last:]])


def refused(head: bytes, limits: HttpLimits, status: int, message: str) -> HttpError:
    """The answer to a head h11 (or check_raw) refused with `status`: 505 or 431 before it."""
    version = head.partition(b"\r\n")[0].rpartition(b" ")[2]
    if _VERSION.fullmatch(version) and version not in (b"HTTP/1.0", b"HTTP/1.1"):
        return HttpError(505)
    if head.count(b"\r\n") - 2 > limits.max_headers:
        return HttpError(431, f"more than {limits.max_headers} header lines")
    return HttpError(status, message)


def h11_refusal(head: bytes, limits: HttpLimits, e: h11.RemoteProtocolError) -> HttpError:
    """h11's refusal as this server's answer: its status hint (400, 431) and its text."""
    return refused(head, limits, e.error_status_hint, _QUOTED.sub("", str(e)) or "malformed request")


def check_request(event: h11.Request, limits: HttpLimits) -> None:
    """What h11 took and this server refuses (see the module docstring); HttpError if any."""
    if event.http_version not in (b"1.0", b"1.1"):
        raise HttpError(505)
    if not event.target.startswith(b"/") or len(event.target) > 4096:
        raise HttpError(400, "the target must be a path (origin form)")
    if len(event.headers) > limits.max_headers:
        raise HttpError(431, f"more than {limits.max_headers} header lines")
    if any(_BAD_VALUE.search(value) for _, value in event.headers):
        raise HttpError(400, "control character in a header value")
    if event.http_version == b"1.1" and sum(name in (b"host", HIDDEN + b"host") for name, _ in event.headers) != 1:
        raise HttpError(400, "HTTP/1.1 needs exactly one Host header")


def fields(event: h11.Request) -> dict[str, list[bytes]]:
    """The request's header values by lower-case name, in the order sent (renamed lines
    under their own names again)."""
    headers: dict[str, list[bytes]] = {}
    for name, value in event.headers:
        headers.setdefault(name.removeprefix(HIDDEN).decode("ascii"), []).append(value)
    return headers


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
