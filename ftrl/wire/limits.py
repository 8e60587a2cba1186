"""Explicit caps on what peers may send: names, sizes, counts and call rates."""

from __future__ import annotations

import re
import time
from collections import OrderedDict

from ftrl.wire.errors import InvalidArgumentError, ResourceExhaustedError

#: Largest gRPC message the coordinator accepts (control plane only, no data).
MAX_CONTROL_MESSAGE = 4 << 20
#: Largest single gRPC message on an actor stream; payloads travel in 1 MiB chunks.
MAX_ACTOR_MESSAGE = 4 << 20
#: Chunk size of actor call payloads.
CHUNK_BYTES = 1 << 20
#: Largest whole call payload (arguments or result) an actor accepts.
MAX_CALL_BYTES = 1 << 30
#: Largest msgpack-encoded constructor kwargs of an actor.
MAX_KWARGS_BYTES = 1 << 20
#: Longest actor name, node id, method name or class path.
MAX_NAME_LEN = 200
#: Most actors the coordinator will hold records for.
MAX_ACTORS = 100_000
#: Most entries in a resources map.
MAX_RESOURCE_KEYS = 32

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-/:@]+$")
_CLASS_PATH_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_METHOD_RE = re.compile(r"^[A-Za-z_]\w*$")


def check_name(value: str, what: str = "name") -> str:
    """Validate an actor name or node id: 1..200 chars of [A-Za-z0-9_.-/:@]."""
    if not value:
        raise InvalidArgumentError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LEN:
        raise InvalidArgumentError(f"{what} is {len(value)} characters; the limit is {MAX_NAME_LEN}")
    if not _NAME_RE.match(value):
        raise InvalidArgumentError(
            f"{what} {value!r} has characters outside [A-Za-z0-9_.-/:@]"
        )
    return value


def check_class_path(value: str) -> str:
    """Validate an actor class path of the form 'package.module:Class'."""
    if len(value) > MAX_NAME_LEN:
        raise InvalidArgumentError(f"class path is {len(value)} characters; the limit is {MAX_NAME_LEN}")
    if not _CLASS_PATH_RE.match(value or ""):
        raise InvalidArgumentError(
            f"class path {value!r} is not of the form 'package.module:Class'"
        )
    return value


#: Private methods that may be called remotely: the state hooks an owner uses to
#: resync a restarted actor.
STATE_HOOKS = frozenset({"__ftrl_state__", "__ftrl_restore__"})


def check_method(value: str) -> str:
    """Validate a method name: a public Python identifier (or one of STATE_HOOKS)."""
    if len(value) > MAX_NAME_LEN:
        raise InvalidArgumentError(
            f"method name of {len(value)} characters is not a valid identifier: the limit is "
            f"{MAX_NAME_LEN}")
    if not value or not _METHOD_RE.match(value):
        raise InvalidArgumentError(f"method name {value[:80]!r} is not a valid identifier")
    if value.startswith("_") and value not in STATE_HOOKS:
        raise InvalidArgumentError(f"method {value!r} is private and cannot be called remotely")
    return value


def check_resources(resources: dict[str, float], what: str = "resources") -> dict[str, float]:
    """Validate a resources map: at most 32 keys, names valid, amounts finite and >= 0."""
    if len(resources) > MAX_RESOURCE_KEYS:
        raise InvalidArgumentError(f"{what} has {len(resources)} keys; the limit is {MAX_RESOURCE_KEYS}")
    for key, amount in resources.items():
        check_name(key, f"{what} key")
        if not (amount >= 0.0) or amount == float("inf"):
            raise InvalidArgumentError(f"{what}[{key!r}] = {amount} must be finite and >= 0")
    return dict(resources)


class RateLimiter:
    """Per-peer token buckets for expensive calls.

    `rate` tokens per second refill up to `burst`; each call takes one. The table
    of peers is bounded (least recently seen peers are forgotten).
    """

    def __init__(self, rate: float, burst: float, what: str, max_peers: int = 10_000):
        self.rate = rate
        self.burst = burst
        self.what = what
        self.max_peers = max_peers
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, peer: str, now: float | None = None) -> None:
        """Take one token for `peer` or raise ResourceExhaustedError naming the limit."""
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.pop(peer, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[peer] = (tokens, now)
            raise ResourceExhaustedError(
                f"rate limit for {self.what}: at most {self.rate:g}/s per peer "
                f"(burst {self.burst:g}); retry later"
            )
        self._buckets[peer] = (tokens - 1.0, now)
        while len(self._buckets) > self.max_peers:
            self._buckets.popitem(last=False)


def peer_host(peer: str) -> str:
    """The host part of a grpc peer string ('ipv4:127.0.0.1:5555' -> '127.0.0.1')."""
    if peer.startswith("ipv4:"):
        return peer[5:].rsplit(":", 1)[0]
    if peer.startswith("ipv6:"):
        return peer[5:].rsplit(":", 1)[0].strip("[]")
    return peer
