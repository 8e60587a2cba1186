"""The HTTP reader's assumption: h11 parses every head ftrl.coordinator.http.rules lets
through (as `for_h11` hands it over) into the same request line and header fields."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftrl.coordinator.http import rules
from ftrl.coordinator.http.messages import HttpError, HttpLimits

LIMITS = HttpLimits()
# mostly well-formed pieces (so that many heads pass the rules), now and then a bad byte
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
    line = draw(method) + b" " + draw(target) + b" " + draw(version)
    fields = [b"".join(f) for f in draw(st.lists(field, max_size=6))]
    if draw(st.integers(0, 5)):
        fields.insert(draw(st.integers(0, len(fields))), b"Host: " + draw(value))
    return b"\r\n".join([line, *fields, b"", b""])


def _h11(head: bytes) -> h11.Request:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(head)
    event = conn.next_event()
    assert isinstance(event, h11.Request)
    return event


@settings(max_examples=1000, deadline=None)
@given(heads())
def test_h11_parses_what_the_rules_take_alike(head):
    try:
        lines = rules.check_head(head, LIMITS)
    except HttpError:
        return
    kept, raw = rules.for_h11(lines)
    event = _h11(kept)  # never refused
    assert b" ".join([event.method, event.target, b"HTTP/" + event.http_version]) == lines[0]
    sent = [(n.lower(), v.strip(b" \t")) for n, _, v in (line.partition(b":") for line in lines[1:])]
    as_sent = {n.encode() for n, _ in raw}
    assert [(n, v) for n, v in event.headers if n not in as_sent] == [(n, v) for n, v in sent if n not in as_sent]
    assert [(n.encode(), v) for n, v in raw] == [(n, v) for n, v in sent if n in as_sent]


@pytest.mark.parametrize("head, kept", [
    (b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"),
    (b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", b"GET / HTTP/1.0\r\n\r\n"),
    (b"GET / HTTP/1.0\r\nHost: a\r\n\r\n", b"GET / HTTP/1.0\r\nHost: a\r\n\r\n"),
])
def test_what_h11_is_not_shown(head, kept):
    assert rules.for_h11(rules.check_head(head, LIMITS))[0] == kept
