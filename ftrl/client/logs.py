"""`ftrl logs`: read actor log files from the workers that hold them.

The coordinator says where an actor runs (or ran); that node's worker serves the file
(`Worker.ReadLog`, see ftrl.worker.logs). A job's logs are those of every actor named
`JOB/...`. Reading needs only the cluster calls (`ClusterCalls`: actors and nodes);
`AsyncClient.logs` hands itself to `read_logs`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from ftrl.client.cluster_calls import ClusterCalls
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import ActorUnavailableError, NotFoundError, error_from_rpc
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.security import secure_channel

READ_TIMEOUT_S = 30.0  # a tail (no follow) must come back within this
FOLLOW_TIMEOUT_S = 24 * 3600.0 + 60.0  # the worker ends a follow after 24 h; this bounds it too
MAX_LINE = 64 << 10  # a longer line is cut (the rest follows as another line)


async def _targets(client: ClusterCalls, target: str) -> list[dict[str, Any]]:
    """The actor named `target`, else the actors of job `target` (names `target/...`)."""
    try:
        return [await client.actor(target)]
    except NotFoundError:
        pass
    actors = [a for a in await client.actors(target.rstrip("/") + "/")]
    if not actors:
        raise NotFoundError(f"no actor and no job named {target!r} (see `ftrl status`)")
    return sorted(actors, key=lambda a: a["name"])


def _where(actor: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> str:
    """The log service address of the node that holds `actor`'s log, or raise why not."""
    node = nodes.get(actor["node_id"]) if actor["node_id"] else None
    if node is None and not actor["node_id"]:
        last = (actor.get("death_reason") or "").split("\n", 1)[0]
        if not last:
            raise ActorUnavailableError(f"actor {actor['name']} ({actor['state']}) has not been "
                                        "placed on a node yet: it has no log")
        raise ActorUnavailableError(
            f"actor {actor['name']} ({actor['state']}) is on no node now (last: {last}); the log "
            "of its earlier incarnations stays in the --log-dir of the node it ran on")
    if node is None:
        raise ActorUnavailableError(
            f"actor {actor['name']} ran on node {actor['node_id']}, which the coordinator no "
            "longer knows; its log is in that node's worker --log-dir")
    if node["state"] == "LOST" or not node["log_address"]:
        why = "is LOST" if node["state"] == "LOST" else "does not serve logs"
        raise ActorUnavailableError(
            f"actor {actor['name']}'s log is on node {actor['node_id']} "
            f"({node['hostname'] or node['address']}), which {why}; read it on that machine "
            "in the worker's --log-dir")
    return node["log_address"]


async def _read_one(client: ClusterCalls, name: str, address: str, tail: int, follow: bool,
                    out: asyncio.Queue) -> None:
    """Stream one actor's log into `out` as (name, line) items."""
    opts = [o for o in channel_options(1 << 20)]
    channel = secure_channel(address, client.security, opts)
    pending = b""
    try:
        stub = pb_grpc.WorkerStub(channel)
        call = stub.ReadLog(pb.ReadLogRequest(name=name, tail_lines=tail, follow=follow),
                            metadata=client.metadata, timeout=FOLLOW_TIMEOUT_S if follow else READ_TIMEOUT_S)
        try:
            async for chunk in call:
                if chunk.rotated and pending:
                    await out.put((name, pending.decode("utf-8", "replace")))
                    pending = b""
                pending += chunk.data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    await out.put((name, line.decode("utf-8", "replace")))
                while len(pending) > MAX_LINE:
                    await out.put((name, pending[:MAX_LINE].decode("utf-8", "replace")))
                    pending = pending[MAX_LINE:]
        except grpc.RpcError as e:
            raise error_from_rpc(e, f"worker at {address} (log of {name})") from None
        if pending:
            await out.put((name, pending.decode("utf-8", "replace")))
    finally:
        await channel.close()


async def read_logs(client: ClusterCalls, target: str, tail: int = 100,
                    follow: bool = False) -> AsyncIterator[tuple[str, str]]:
    """Yield (actor name, line) from the log of actor `target`, or of every actor of job
    `target`: the last `tail` lines of each, then (follow) new lines as they come."""
    actors = await _targets(client, target)
    nodes = {n["node_id"]: n for n in await client.nodes()}
    if len(actors) == 1 and actors[0]["name"] == target:
        sources = [(actors[0]["name"], _where(actors[0], nodes))]
    else:
        sources = []
        for actor in actors:
            try:
                sources.append((actor["name"], _where(actor, nodes)))
            except ActorUnavailableError as e:
                yield actor["name"], f"(no log: {e})"
    single = len(actors) == 1 and actors[0]["name"] == target
    # without follow, one actor after another, each whole; with it, all at once
    for group in ([dict([s]) for s in sources] if not follow else [dict(sources)]):
        async with contextlib.aclosing(_pump(group, client, tail, follow, single)) as items:
            async for item in items:
                yield item


async def _pump(sources: dict[str, str], client: ClusterCalls, tail: int, follow: bool,
                single: bool) -> AsyncIterator[tuple[str, str]]:
    """Read the logs of `sources` (name -> worker address) at once, yielding (name, line)
    as they come. A failed read raises for a single actor, else becomes a line saying so.
    Closing this generator (Ctrl-C) cancels and waits for every read, bounded."""
    out: asyncio.Queue = asyncio.Queue(10_000)
    tasks = {asyncio.ensure_future(_read_one(client, n, a, tail, follow, out)): n
             for n, a in sources.items()}
    getter: asyncio.Future | None = None
    try:
        while tasks or not out.empty():
            if getter is None:
                getter = asyncio.ensure_future(out.get())
            await asyncio.wait({getter, *tasks}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                item, getter = getter.result(), None
                yield item
                continue
            for task in [t for t in tasks if t.done()]:
                name = tasks.pop(task)
                error = None if task.cancelled() else task.exception()
                if error is None:
                    continue
                if single:
                    raise error
                yield name, f"(log {'stream ended' if follow else 'not read'}: {error})"
    finally:
        if getter is not None:
            getter.cancel()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(5.0):
                await asyncio.gather(*tasks, *([getter] if getter else []), return_exceptions=True)
