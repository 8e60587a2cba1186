"""h11 parses a request head (ftrl.coordinator.http.reader.parse_head) and
ftrl.coordinator.http.rules decides what h11 leaves to this server: what is taken is the
head as sent, what h11 refuses is refused, and the few heads h11 is kept from deciding
are answered as they always were."""

from __future__ import annotations

import h11
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from ftrl.coordinator.http import rules
from ftrl.coordinator.http.messages import HttpError, HttpLimits, Request
from ftrl.coordinator.http.reader import parse_head

LIMITS = HttpLimits()
# mostly well-formed pieces (so that many heads are taken), now and then a bad byte
_ODD = [b" ", b"\t", b"\r", b"\n", b"\r\n", b":", b",", b"\x00", b"\x01", b"\x0b", b"\x7f", b"\x80", b"\xff"]
_TCHAR = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_VCHAR = bytes(range(0x21, 0x7f)) + b"\x80\xff"
odd = st.sampled_from(_ODD)


def _mixed(alphabet: bytes, min_size: int = 0) -> st.SearchStrategy[bytes]:
    one = st.integers(0, 40).flatmap(lambda i: odd if i == 0 else st.sampled_from([bytes([b]) for b in alphabet]))
    return st.lists(one, min_size=min_size, max_size=8).map(b"".join)


method = st.sampled_from([b"GET", b"POST", b"HEAD", b"M-SEARCH", b"get"]) | _mixed(_TCHAR, 1)
target = st.sampled_from([b"/", b"/healthz", b"/login?x=1", b"/a%2Fb", b"*"]) | _mixed(_VCHAR).map(lambda t: b"/" + t)
version = st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/x"])
name = st.sampled_from([b"Content-Length", b"Transfer-Encoding", b"X-A", b"Cookie", b"HOST"]) | _mixed(_TCHAR, 1)
value = (st.sampled_from([b"127.0.0.1", b"5", b"05", b"1, 1", b"1,2", b"chunked", b"gzip", b""])
         | _mixed(_VCHAR + b" \t"))
field = st.tuples(name, st.sampled_from([b":", b": ", b":\t", b": ", b" : "]), value, st.sampled_from([b"", b" ", b"\t"]))


@st.composite
def heads(draw) -> bytes:
    """A head as the stream reader hands it over: it ends at its first CRLF CRLF."""
    line = draw(method) + b" " + draw(target) + b" " + draw(version)
    fields = [b"".join(f) for f in draw(st.lists(field, max_size=6))]
    if draw(st.integers(0, 5)):
        fields.insert(draw(st.integers(0, len(fields))), b"Host: " + draw(value))
    head = b"\r\n".join([line, *fields, b"", b""])
    assume(head.find(b"\r\n\r\n") == len(head) - 4)
    return head


def _parse(head: bytes, limits: HttpLimits = LIMITS) -> Request:
    return parse_head(h11.Connection(h11.SERVER), head, limits)


def _status(head: bytes, limits: HttpLimits = LIMITS) -> int:
    with pytest.raises(HttpError) as e:
        _parse(head, limits)
    return e.value.status


@settings(max_examples=1000, deadline=None)
@given(heads())
def test_a_head_taken_is_the_head_as_sent(head):
    try:
        request = _parse(head)
    except HttpError as e:
        assert e.status in (400, 431, 505)
        return
    lines = head[:-4].split(b"\r\n")  # no bare LF, no obs-fold: these are the lines h11 read
    assert f"{request.method} {request.target} {request.version}".encode() == lines[0]
    sent: dict[str, list[bytes]] = {}
    for line in lines[1:]:
        field_name, _, field_value = line.partition(b":")
        sent.setdefault(field_name.lower().decode(), []).append(field_value.strip(b" \t"))
    assert request.headers == sent
    assert all(not n.startswith(rules.HIDDEN.decode()) for n in request.headers)


@settings(max_examples=1000, deadline=None)
@given(heads())
@example(b"GET / HTTP/1.1\r\nTransfer-Encoding:\n\r\n\r\n")  # h11 reads the bare LF as a line end (501)
def test_what_h11_refuses_is_refused(head):
    """h11 decides every head it is shown as sent: a refusal is this server's answer (but
    for the 505 and 431 that rank before it, rules.refused). A head the raw checks refuse
    (a bare LF, obs-fold) is never shown to h11."""
    assume(rules.for_h11(head) == head)
    try:
        rules.check_raw(head)
    except HttpError:
        assume(False)
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(head)
    try:
        conn.next_event()
    except h11.RemoteProtocolError as e:
        assert _status(head) in (e.error_status_hint, 505, 431)


H = b"Host: 127.0.0.1\r\n"


@pytest.mark.parametrize("head, shown", [
    (b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: a\r\n%bTransfer-Encoding: chunked\r\n\r\n"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", None),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-length:5\r\ncontent-length: 5 \r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: a\r\nContent-length:5\r\n%bcontent-length: 5 \r\n\r\n"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: a\r\n%bContent-Length: 1, 1\r\n\r\n"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: a\r\n%bContent-Length: 1\r\n%bContent-Length: 2\r\n\r\n"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0000000000001\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: a\r\n%bContent-Length: 0000000000001\r\n\r\n"),
    (b"GET / HTTP/1.0\r\nHost: a\r\nHOST: b\r\n\r\n", b"GET / HTTP/1.0\r\nHost: a\r\n%bHOST: b\r\n\r\n"),
    (b"GET / HTTP/1.0\r\nHost : a\r\nX-Host: b\r\n\r\n", None),  # not a Host line (h11 refuses it)
])
def test_what_h11_is_shown_renamed(head, shown):
    assert rules.for_h11(head) == (head if shown is None else shown.replace(b"%b", rules.HIDDEN))


@pytest.mark.parametrize("head, status", [
    # raw checks: h11 would take these
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\nX: y\r\n\r\n", 400),  # a bare LF ends a line
    (b"GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\nmore\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\r\n folded\r\n\r\n", 400),  # obs-fold
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\r\n\tfolded\r\n\r\n", 400),
    # on h11's event
    (b"GET / HTTP/3.0\r\n\r\n", 505),
    (b"GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505),
    (b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n", 400),
    (b"GET http://x/ HTTP/1.1\r\n" + H + b"\r\n", 400),
    (b"GET /" + b"a" * 4096 + b" HTTP/1.1\r\n" + H + b"\r\n", 400),
    (b"GET / HTTP/1.1\r\n" + H + b"X: a\x01b\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n" + H + b"X: a\x7f\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n" + H + b"Content-Length: 1\x01\r\n\r\n", 400),  # a renamed line too
    (b"GET / HTTP/1.1\r\n" + H + b"host: 127.0.0.2\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n" + H + b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"\r\n", 431),
    # refused by h11, ranked as before
    (b"GET /\x01 HTTP/2.0\r\n" + H + b"\r\n", 505),
    (b"GET /a\nb HTTP/2.0\r\n" + H + b"\r\n", 505),
    (b"GET / HTTP/1.1\r\n" + H + b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"Bad\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\n\r\n", 400),
    (b"GET / HTTP/x\r\n" + H + b"\r\n", 400),
])
def test_statuses(head, status):
    assert _status(head) == status


def test_renamed_lines_keep_their_names():
    request = _parse(b"POST /login HTTP/1.0\r\nHost: a\r\nContent-Length: 5\r\nhost: b\r\n"
                     b"Transfer-Encoding: gzip\r\ncontent-length: 5\r\n\r\n")
    assert request.headers == {"host": [b"a", b"b"], "content-length": [b"5", b"5"],
                               "transfer-encoding": [b"gzip"]}
    assert request.header("host") is None  # HTTP/1.0 with two Hosts: as if none
    with pytest.raises(HttpError) as e:
        rules.body_length(request, 4096)
    assert e.value.status == 400  # Transfer-Encoding with a Content-Length (after routing)


def test_h11_texts_quote_no_request_bytes():
    with pytest.raises(HttpError) as e:
        _parse(b"GET / HTTP/1.1\r\n" + H + b"Cookie: s=secret\x00\r\n\r\n")
    assert (e.value.status, e.value.message) == (400, "illegal header line")
    with pytest.raises(HttpError) as e:
        _parse(b"GET  /secret HTTP/1.1\r\n" + H + b"\r\n")
    assert (e.value.status, e.value.message) == (400, "illegal request line")
