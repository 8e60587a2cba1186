"""The weight broadcast tree: its shape, and the relay each runner in it runs.

The driver sends weights to at most `weights_fanout` runners; each applies them and
forwards the same payload to its children (`EnvRunner.set_weights_tree` ->
`relay_weights`), k-ary, over the runners that need the version. A subtree travels as
`[name, incarnation, [subtrees...]]` (msgpack-able). Children are called by strict
handles on the incarnation the driver synced, so a restarted runner is never fed by a
relay. Every runner of the subtree reports back ({name: {"weights_version": v} or
{"error": ...}}); the ones that did not confirm are sent to directly by the driver.

Large weights take the weights plane instead (`ftrl.rl.weights.plane`): each runner
pulls them from its parent's plane server (`runner_node`, `pull_weights`), cut-through.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from typing import Any, Protocol

import numpy as np


class WeightsHolder(Protocol):
    """What a relay applies weights on (an EnvRunner)."""

    def set_weights(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> dict[str, Any]: ...


def build_weights_tree(targets: list[tuple[str, int]], fanout: int) -> list[list]:
    """The k-ary broadcast tree over `targets` ((name, incarnation), in order): the
    driver's children first, then level by level (heap order: target j's children are
    targets fanout*(j+1) .. fanout*(j+1)+fanout-1). Returns the driver's children as
    subtrees `[name, incarnation, [subtrees...]]` (msgpack-able)."""
    k = max(1, int(fanout))
    nodes = [[str(name), int(inc), []] for name, inc in targets]
    for j, node in enumerate(nodes):
        first = k * (j + 1)
        node[2] = nodes[first:first + k]
    return nodes[:k]


def subtree_names(subtree: list) -> list[str]:
    """Every runner name in a subtree `[name, incarnation, [subtrees...]]`, root first."""
    out: list[str] = []
    stack = [subtree]
    while stack:
        name, _, children = stack.pop()
        out.append(str(name))
        stack.extend(reversed(children))
    return out


def subtree_height(subtree: list) -> int:
    """Hops from the root of `subtree` to its deepest runner, counting the root (>= 1)."""
    _, _, children = subtree
    return 1 + max((subtree_height(c) for c in children), default=0)


# ---------------------------------------------------------------------- runtime helpers


def _peer_client() -> Any:
    """The client this actor calls other actors with, or None (in-process runners)."""
    from ftrl.client.context import get_runtime_context

    ctx = get_runtime_context()
    if ctx is None or not ctx.coordinator:
        return None
    return ctx.client()


def _own_name(default: str = "self") -> str:
    """This actor's name (`default` outside an actor)."""
    from ftrl.client.context import get_runtime_context

    ctx = get_runtime_context()
    return ctx.name if ctx is not None else default


def _error_entry(error: BaseException | str, unreached: bool = False) -> dict[str, Any]:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    entry: dict[str, Any] = {"error": text[:2000]}
    if unreached:
        entry["unreached"] = True
    return entry


class _PeerHandles:
    """Strict handles to the children of one relay, kept between broadcasts."""

    def __init__(self) -> None:
        self._handles: dict[str, Any] = {}

    def get(self, client: Any, name: str, incarnation: int) -> Any:
        """A strict handle to `name` that calls exactly `incarnation` (the one the driver
        synced); a different current incarnation is refused, never called."""
        from ftrl.wire.errors import StaleIncarnationError

        handle = self._handles.get(name)
        if handle is None or (incarnation and handle.incarnation != incarnation):
            try:
                handle = client.get_actor(name, strict=True)
            except TypeError:  # an in-process LocalClient: handles are always strict
                handle = client.get_actor(name)
            self._handles[name] = handle
        if incarnation and handle.incarnation != incarnation:
            self._handles.pop(name, None)
            raise StaleIncarnationError(
                f"{name} is at incarnation {handle.incarnation}, the broadcast was meant for "
                f"incarnation {incarnation} (it is resynced by its owner)")
        return handle

    def drop(self, name: str) -> None:
        self._handles.pop(name, None)


# ---------------------------------------------------------------------- the relay


def relay_weights(
    runner: WeightsHolder,
    version: int,
    weights: np.ndarray,
    filter_state: dict | None,
    children: list | None,
    hop_timeout_s: float,
) -> dict[str, dict[str, Any]]:
    """Apply weights on `runner` (its `set_weights`), then forward them to `children` in
    parallel and collect one result per runner of the subtree.

    A child that fails does not fail its siblings; its descendants are reported as
    `unreached` (the driver sends to them directly). Every wait is bounded by
    `hop_timeout_s` per level of the subtree below."""
    own = runner.set_weights(version, weights, filter_state)
    out: dict[str, dict[str, Any]] = {_own_name(): dict(own)}
    out.update(forward_weights(runner, version, weights, filter_state, children or [], hop_timeout_s))
    return out


def forward_weights(
    runner: Any,
    version: int,
    weights: np.ndarray,
    filter_state: dict | None,
    children: list,
    hop_timeout_s: float,
) -> dict[str, dict[str, Any]]:
    """Send `set_weights_tree` to each child subtree in parallel (see `relay_weights`).
    The strict handles to the children are kept on `runner` between broadcasts."""
    out: dict[str, dict[str, Any]] = {}
    if not children:
        return out

    def unreached(subtree: list, why: str) -> None:
        for name in subtree_names(subtree)[1:]:
            out[name] = _error_entry(f"not reached: {why}", unreached=True)

    try:
        client = _peer_client()
    except Exception as e:  # no way to reach the cluster: the driver sends directly
        client, cause = None, f"{type(e).__name__}: {e}"
    else:
        cause = "this runner has no runtime client"
    if client is None:
        for sub in children:
            out[str(sub[0])] = _error_entry(f"not forwarded: {cause}", unreached=True)
            unreached(sub, f"not forwarded: {cause}")
        return out
    peers = runner.__dict__.setdefault("_weight_peers", _PeerHandles())
    futs: list[tuple[list, float, Any]] = []
    for sub in children:
        name, incarnation, grand = str(sub[0]), int(sub[1]), sub[2]
        budget = hop_timeout_s * subtree_height(sub)
        try:
            handle = peers.get(client, name, incarnation).options(timeout=budget)
            fut = handle.submit("set_weights_tree", version, weights, filter_state, grand, hop_timeout_s)
        except Exception as e:
            peers.drop(name)
            out[name] = _error_entry(e)
            unreached(sub, f"{name} failed")
            continue
        futs.append((sub, budget, fut))
    deadline = time.monotonic() + max((b for _, b, _ in futs), default=0.0) + 1.0
    for sub, _, fut in futs:
        name = str(sub[0])
        try:
            result = fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except cf.TimeoutError:
            fut.cancel()
            peers.drop(name)
            out[name] = _error_entry(f"FtrlTimeoutError: no answer within {hop_timeout_s:g}s per hop")
            unreached(sub, f"{name} timed out")
            continue
        except Exception as e:
            peers.drop(name)
            out[name] = _error_entry(e)
            unreached(sub, f"{name} failed")
            continue
        entries = dict(result) if isinstance(result, dict) else {}
        own = entries.pop(name, None) or next(
            (entries.pop(k) for k in list(entries) if k not in subtree_names(sub)), None)
        out[name] = own if isinstance(own, dict) else {"weights_version": int(version)}
        for key in subtree_names(sub)[1:]:
            out[key] = entries.get(key) or _error_entry(f"no report from {name}", unreached=True)
    return out


# ---------------------------------------------------------------------- the plane, runner side


def runner_node() -> Any:
    """A new `WeightsNode` for a runner: on its node's address with the cluster token
    inside an actor, on loopback without a token in-process."""
    from ftrl.client.context import get_runtime_context
    from ftrl.rl.weights.plane import WeightsNode

    ctx = get_runtime_context()
    return WeightsNode(ctx.host if ctx else "127.0.0.1", ctx.security.token if ctx else None)


def pull_weights(node: Any, source: str, key: int, nbytes: int, timeout_s: float) -> np.ndarray:
    """Pull the blob `key` (`nbytes` of float32) from the plane server at `source` into
    `node`'s store, serving it onward to this runner's children while it arrives."""
    from ftrl.rl.weights.plane import fetch

    return fetch(source, node.token, int(key), node.store, int(nbytes), float(timeout_s))
