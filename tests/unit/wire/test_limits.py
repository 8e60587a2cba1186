"""Caps on names, methods, resources and call rates."""

from __future__ import annotations

import pytest

from ftrl.wire.errors import InvalidArgumentError, ResourceExhaustedError
from ftrl.wire.limits import (
    RateLimiter,
    check_class_path,
    check_method,
    check_name,
    check_resources,
    peer_host,
)


@pytest.mark.parametrize("name", ["a", "job/env_runner/0", "n-1.x_y:z@3", "x" * 200])
def test_good_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 201, "a b", "a\nb", "ä", "a;b", "a\x00"])
def test_bad_names(name):
    with pytest.raises(InvalidArgumentError, match="node id"):
        check_name(name, "node id")


@pytest.mark.parametrize("path", ["m:C", "pkg.mod:Cls", "a.b.c:Outer.Inner", "_p:_C"])
def test_good_class_paths(path):
    assert check_class_path(path) == path


@pytest.mark.parametrize(
    "path", ["", "mod", "mod.Cls", ":C", "m:", "m::C", "1m:C", "m:1C", "m.:C", "m:C.", "a b:C",
             "m:C;x", "m/x:C", "m:" + "C" * 199],
)
def test_bad_class_paths(path):
    with pytest.raises(InvalidArgumentError):
        check_class_path(path)


def test_methods():
    assert check_method("incr") == "incr"
    assert check_method("__ftrl_state__") == "__ftrl_state__"
    assert check_method("__ftrl_restore__") == "__ftrl_restore__"
    for private in ("_secret", "__init__", "__class__", "__reduce__"):
        with pytest.raises(InvalidArgumentError, match="private"):
            check_method(private)
    for bad in ("", "a-b", "1x", "a.b", "x" * 201, "a b"):
        with pytest.raises(InvalidArgumentError, match="not a valid identifier"):
            check_method(bad)


def test_resources():
    assert check_resources({"cpu": 1.0, "gpu": 0.0, "sim": 2.5}) == {"cpu": 1.0, "gpu": 0.0, "sim": 2.5}
    assert check_resources({}) == {}
    for bad in ({"cpu": -0.5}, {"cpu": float("nan")}, {"cpu": float("inf")}, {"": 1.0},
                {"a b": 1.0}, {f"k{i}": 1.0 for i in range(33)}):
        with pytest.raises(InvalidArgumentError):
            check_resources(bad)


def test_rate_limiter_burst_and_refill():
    limiter = RateLimiter(rate=2.0, burst=3.0, what="CreateActor")
    for _ in range(3):
        limiter.take("p", now=100.0)
    with pytest.raises(ResourceExhaustedError, match="CreateActor"):
        limiter.take("p", now=100.0)
    limiter.take("other", now=100.0)  # per peer
    with pytest.raises(ResourceExhaustedError):
        limiter.take("p", now=100.4)  # 0.8 tokens
    limiter.take("p", now=100.6)  # 1.2 tokens
    limiter.take("p", now=110.0)
    limiter.take("p", now=110.0)
    limiter.take("p", now=110.0)  # refilled to the burst, not beyond
    with pytest.raises(ResourceExhaustedError):
        limiter.take("p", now=110.0)


def test_rate_limiter_forgets_old_peers():
    limiter = RateLimiter(rate=1.0, burst=1.0, what="x", max_peers=10)
    for i in range(100):
        limiter.take(f"peer{i}", now=1.0)
    assert len(limiter._buckets) == 10
    limiter.take("peer0", now=1.0)  # forgotten, so it starts with a full bucket


@pytest.mark.parametrize(
    ("peer", "host"),
    [("ipv4:127.0.0.1:5555", "127.0.0.1"), ("ipv6:[::1]:5555", "::1"), ("unix:/tmp/s", "unix:/tmp/s")],
)
def test_peer_host(peer, host):
    assert peer_host(peer) == host
