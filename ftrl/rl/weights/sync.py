"""Weight sync, driver side: one version pushed to many runners over three paths.

`WeightSync.push` sends weights (and the observation filter state) to runner slots:

- weights of at least `PLANE_MIN_BYTES`, where this process has a weights plane node
  (`plane_node`): published on it, and every runner pulls from its parent in the
  broadcast tree (`ftrl.rl.weights.tree`), all at once, cut-through (`pull_weights`);
- more runners than `fanout`, while runners relay: down the broadcast tree by RPC
  (`set_weights_tree`), each runner forwarding to its children;
- otherwise, and for every runner the two above did not confirm: directly
  (`set_weights`), in parallel.

A runner that confirms gets `synced_version = version`. Failures of the calls the
driver made itself go to `on_failure(slot, error, what)` (the runner group's policy); a
runner only a relay failed to reach is sent to directly instead.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ftrl.rl.actor_group import describe_error
from ftrl.rl.weights.tree import build_weights_tree, subtree_height
from ftrl.wire.errors import ActorError, FtrlError, FtrlTimeoutError, MethodNotFoundError

log = logging.getLogger(__name__)

#: Weights at least this large travel on the weights plane (plain TCP, cut-through tree).
PLANE_MIN_BYTES = 1 << 20


class SyncTarget(Protocol):
    """What `WeightSync` reads and sets on a runner slot (`RunnerSlot` has it all)."""

    name: str
    handle: Any  # strict, pinned to `incarnation`
    incarnation: int
    state: str  # "healthy" while it may be sent to
    synced_version: int
    plane_address: str  # its weights plane server, for `plane_incarnation`
    plane_incarnation: int


#: (slot, error, what): the runner group's failure policy; may raise
OnFailure = Callable[[Any, BaseException, str], None]
#: ActorGroup.call_all: (handles by name, method, *args, timeout=) -> (results, errors)
CallAll = Callable[..., tuple[dict[str, Any], dict[str, BaseException]]]


def plane_node(client: Any) -> Any:
    """This process's node on the weights plane, when its runners can reach it: inside an
    actor (its node's address), or on a loopback cluster; None otherwise. TLS clusters
    keep weights on gRPC (the plane speaks plain TCP)."""
    from ftrl.client.context import get_runtime_context
    from ftrl.rl.weights.plane import WeightsNode
    from ftrl.wire.security import is_loopback

    security = getattr(getattr(client, "_aio", None), "security", None)
    address = getattr(client, "address", "")
    if security is None or security.tls:
        return None
    ctx = get_runtime_context()
    if ctx is not None:
        return WeightsNode(ctx.host, security.token)
    host = address.rpartition(":")[0].strip("[]")
    return WeightsNode("127.0.0.1", security.token) if host and is_loopback(host) else None


class WeightSync:
    """Pushes weight versions to runner slots (module docstring).

    Args:
        client: the cluster client (decides whether a weights plane node is started).
        kind: what the runners are, for logs ("env_runner").
        fanout: children per node of the broadcast tree (the driver's included).
        hop_timeout_s: the bound of one call, and of each level of the tree.
        call_all: calls one method on many handles in parallel (`ActorGroup.call_all`).
        on_failure: the failure policy for a call the driver made (may raise).
    """

    def __init__(self, client: Any, *, kind: str, fanout: int, hop_timeout_s: float, call_all: CallAll,
                 on_failure: OnFailure) -> None:
        self.plane = plane_node(client)  # None: weights go over gRPC only
        self.kind = kind
        self.fanout = max(1, int(fanout))
        self.hop_timeout_s = hop_timeout_s
        self.relay = True  # runners forward weights; off once one says it cannot
        self.last: dict[str, Any] = {}  # how the last push went (tests, benchmarks)
        self._call_all = call_all
        self._on_failure = on_failure

    def push(self, targets: list[SyncTarget], version: int, weights: np.ndarray,
             filter_state: dict | None = None) -> None:
        """Bring every one of `targets` to `version` (the path: module docstring)."""
        self.last = {"version": version, "targets": len(targets), "tree": False,
                     "via_tree": 0, "direct_retries": 0, "plane": False}
        if targets and self.plane is not None and weights.nbytes >= PLANE_MIN_BYTES:
            targets = self._push_plane(targets, version, weights, filter_state)
            self.last["direct_retries"] = len(targets)
        elif len(targets) > self.fanout and self.relay:
            targets = self._push_tree(targets, version, weights, filter_state)
            self.last["direct_retries"] = len(targets)
        self._push_direct(targets, version, weights, filter_state)

    def close(self) -> None:
        if self.plane is not None:
            self.plane.close()

    def _push_plane(self, targets: list[SyncTarget], version: int, weights: np.ndarray,
                    filter_state: dict | None) -> list[SyncTarget]:
        """Large weights: published on this process's weights plane server; every runner
        pulls from its parent in the broadcast tree (the first `fanout` from here), all at
        once, cut-through. Returns the runners to send to directly."""
        assert self.plane is not None
        hop = self.hop_timeout_s
        key = self.plane.new_key()  # never reused: versions repeat after a restore
        self.plane.store.publish(key, weights)
        asks = {s.name: s.handle.options(timeout=hop).submit("weights_address")
                for s in targets if s.plane_incarnation != s.incarnation}
        usable: list[SyncTarget] = []
        for slot in targets:
            fut = asks.get(slot.name)
            if fut is not None:
                try:
                    slot.plane_address, slot.plane_incarnation = fut.result(), slot.incarnation
                except FtrlError as e:
                    log.info("%s has no weights plane address (%s): sent directly", slot.name, describe_error(e))
                    continue
            usable.append(slot)
        by_name = {s.name: s for s in usable}
        source: dict[str, tuple[str, int]] = {}  # name -> (address to pull from, depth)
        stack = [(sub, self.plane.address, 1) for sub in build_weights_tree(
            [(s.name, s.incarnation) for s in usable], self.fanout)]
        while stack:
            (name, _, children), parent, depth = stack.pop()
            source[name] = (parent, depth)
            stack.extend((sub, by_name[name].plane_address, depth + 1) for sub in children)
        futs = {}
        for slot in usable:
            address, depth = source[slot.name]
            budget = hop * depth
            futs[slot.name] = slot.handle.options(timeout=budget + 5.0).submit(
                "pull_weights", version, key, address, int(weights.nbytes), filter_state, budget)
        confirmed = set()
        for name, fut in futs.items():
            try:
                fut.result()
                by_name[name].synced_version = version
                confirmed.add(name)
            except FtrlError as e:
                log.info("%s did not get weights v%d over the plane (%s): sent directly", name, version, describe_error(e))
        self.last.update({"plane": True, "tree": len(usable) > self.fanout, "via_tree": len(confirmed)})
        return [s for s in targets if s.name not in confirmed and s.state == "healthy"]

    def _push_direct(self, targets: list[SyncTarget], version: int, weights: np.ndarray,
                     filter_state: dict | None) -> None:
        _, errors = self._call_all({s.name: s.handle for s in targets}, "set_weights", version, weights,
                                   filter_state, timeout=self.hop_timeout_s)
        for slot in targets:
            if slot.name in errors:
                self._on_failure(slot, errors[slot.name], "set_weights")
            else:
                slot.synced_version = version

    def _push_tree(self, targets: list[SyncTarget], version: int, weights: np.ndarray,
                   filter_state: dict | None) -> list[SyncTarget]:
        """Send down the broadcast tree; returns the runners still to be sent to directly
        (the driver's own children that failed went through `on_failure` already)."""
        by_name = {s.name: s for s in targets}
        roots = build_weights_tree([(s.name, s.incarnation) for s in targets], self.fanout)
        self.last["tree"] = True
        hop = self.hop_timeout_s
        futs: list[tuple[SyncTarget, list, Any]] = []
        confirmed: set[str] = set()
        failed_roots: list[tuple[SyncTarget, BaseException]] = []
        tallest = 0
        for root in roots:
            name, _, children = root
            slot = by_name[name]
            tallest = max(tallest, subtree_height(root))
            budget = hop * subtree_height(root)
            try:
                fut = slot.handle.options(timeout=budget).submit(
                    "set_weights_tree", version, weights, filter_state, children, hop)
            except FtrlError as e:
                failed_roots.append((slot, e))
                continue
            futs.append((slot, children, fut))
        cannot_relay = False
        deadline = time.monotonic() + hop * tallest + 1.0
        for slot, _, fut in futs:
            try:
                result = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except cf.TimeoutError:
                fut.cancel()
                failed_roots.append((slot, FtrlTimeoutError(f"{slot.name}.set_weights_tree: no answer")))
                continue
            except MethodNotFoundError:
                cannot_relay = True  # an actor class without the relay: send directly
                continue
            except ActorError as e:
                if e.remote_type.endswith("MethodNotFoundError") or "set_weights_tree" in e.remote_message:
                    cannot_relay = True  # an actor class without the relay: send directly
                    continue
                failed_roots.append((slot, e))
                continue
            except FtrlError as e:
                failed_roots.append((slot, e))
                continue
            confirmed.add(slot.name)
            slot.synced_version = version
            for name, entry in (result or {}).items():
                other = by_name.get(name)
                if other is None or other is slot or not isinstance(entry, dict):
                    continue
                if entry.get("weights_version") == version and "error" not in entry:
                    confirmed.add(name)
                    other.synced_version = version
                elif "not forwarded" in str(entry.get("error", "")):
                    cannot_relay = True
        if cannot_relay:
            self.relay = False
            log.info("%ss cannot relay weights; sending to each directly from now on", self.kind)
        self.last["via_tree"] = len(confirmed)
        for slot, error in failed_roots:
            confirmed.add(slot.name)  # nothing to retry: its failure is handled now
            self._on_failure(slot, error, "set_weights")
        return [s for s in targets if s.name not in confirmed and s.state == "healthy"]
