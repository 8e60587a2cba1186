"""`/api/status`: its body, built incrementally, and the per-job return curves.

`/api/status` is `ftrl status --json` (the same proto views, ftrl.coordinator.views,
through the same ftrl.wire.convert functions) plus `events` (recent), `deaths` (each
actor's latest death, kept after it restarts), `curves` (iteration and
episode_return_mean of the newest jobs, last 500 points) and `experiments` (each
tuning experiment: its scheduler actor `NAME/tuner` and its trials, the jobs
`NAME-T`); `/api/jobs/JOB/curve` is one job's curve. Building it re-encodes only the records that changed since the last build
(nothing but the heartbeat ages while nothing durable changed), gives the loop back every
5 ms of work, and the body is shared by the requests of the next 0.5 s. At 5,000 nodes
and 10,000 actors: ~15 ms of the loop a request, 0.9 s of CPU for the very first one
(spread at half the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ftrl.coordinator import views
from ftrl.coordinator.events import RETAINED_EVENTS
from ftrl.coordinator.http.messages import HttpLimits
from ftrl.coordinator.records import ActorRecord, NodeRecord
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.convert import actor_dict, cluster_dict, event_dict, job_dict, mesh_dict, node_dict

if TYPE_CHECKING:
    from ftrl.coordinator.controller import Controller
    from ftrl.coordinator.jobs import JobRecord

log = logging.getLogger(__name__)

EVENTS_SHOWN = 200
#: The scheduler actor of a tuning experiment (ftrl.tune.controller, never imported here).
TUNER_CLASS = "ftrl.tune.controller:TuneController"
CURVE_POINTS = 500
CURVE_JOBS = 20  # jobs whose curve /api/status carries (the newest submitted)
_CURVE_READ = 1000
_CURVE_READS = 3  # store reads per job and build at most (the rest comes with the next one)


def sanitize(value: Any, depth: int = 0) -> Any:
    """JSON-safe: non-finite floats become null (browsers refuse NaN in JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 64:
        return None
    if isinstance(value, dict):
        return {k: sanitize(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v, depth + 1) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, allow_nan=False, separators=(",", ":"))


@dataclass
class _Curve:
    submitted_at: float
    seq: int
    last: int  # the newest iteration read
    iterations: deque = field(default_factory=lambda: deque(maxlen=CURVE_POINTS))
    returns: deque = field(default_factory=lambda: deque(maxlen=CURVE_POINTS))


class Curves:
    """Per-job return curves from the job results store, read incrementally (each row
    once) and kept to the last CURVE_POINTS points."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self._curves: dict[str, _Curve] = {}

    def get(self, job: JobRecord) -> dict[str, list]:
        cur = self._curves.get(job.job_id)
        if cur is None or cur.submitted_at != job.submitted_at:
            cur = _Curve(job.submitted_at, -1, max(0, job.iteration - CURVE_POINTS))
            self._curves[job.job_id] = cur
        if cur.seq != job.seq:
            cur.seq = job.seq
            for _ in range(_CURVE_READS):
                rows = self.c.store.results(job.job_id, cur.last, _CURVE_READ)
                for iteration, row in rows:
                    cur.iterations.append(iteration)
                    cur.returns.append(self._return(row))
                    cur.last = iteration
                if len(rows) < _CURVE_READ:
                    break
                cur.seq = -1  # more to read next time
        return {"iteration": list(cur.iterations), "episode_return_mean": list(cur.returns)}

    @staticmethod
    def _return(row: bytes) -> float | None:
        try:
            value = codec.decode(row, codec.SMALL_LIMITS)
        except Exception:
            return None
        value = value.get("episode_return_mean") if isinstance(value, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return None
        return float(value)

    def prune(self) -> None:
        for job_id in [j for j in self._curves if j not in self.c.jobs.jobs]:
            del self._curves[job_id]


def _getter(cls: type, skip: frozenset[str]) -> attrgetter:
    """All of a record type's dataclass fields but `skip`, so a field added later is in
    the key by itself (tests/unit/coordinator/test_http.py checks that no field shown is missing)."""
    return attrgetter(*[f.name for f in dataclasses.fields(cls) if f.name not in skip])


#: Every field of the actor record (its spec is never changed in place, so the same spec
#: object means the same spec): while these stay the same, so does the actor's JSON.
actor_key = _getter(ActorRecord, frozenset())
#: The node's plain fields; its containers are copied in node_key, and its heartbeat
#: age (which changes all the time) is spliced into the JSON on every build.
_node_fields = _getter(NodeRecord, frozenset(
    {"last_heartbeat", "actors", "used", "resources", "pending_stops", "failure_times"}))


def node_key(n: NodeRecord) -> tuple:
    """Every field of the node that `node_dict(n.to_proto(now))` may show, but the age."""
    return (_node_fields(n), frozenset(n.actors), tuple(n.used.items()), tuple(n.resources.items()))


_AGE = '"last_heartbeat_age_s":'


@dataclass
class _Records:
    """The part of `/api/status` that changes only with the durable state or events: made
    again when the signature changes or `FULL_CHECK_S` passed, reused between."""

    signature: tuple
    made_at: float
    nodes: list[NodeRecord]  # in order; their heartbeat ages go between the pieces
    node_pieces: list[str]
    actors: bytes
    jobs: bytes
    tail: bytes  # events, deaths, curves


class StatusBuilder:
    """Builds `/api/status` (see the module docstring).

    Each node's and actor's JSON is made by the same proto view and convert function as
    `ftrl status --json`, and kept with a key of every field it shows, so a build
    re-encodes only the records that changed. While nothing durable changed (the store's
    commit count, the event seq and the record counts are the same) the records part is
    reused, and only the heartbeat ages and learner groups are made again; every
    FULL_CHECK_S all records are checked again in the background, at half speed. The
    loop gets control back every `slice_s` of work; concurrent requests share one
    build, whose body is reused for `status_cache_s`."""

    FULL_CHECK_S = 60.0

    def __init__(self, controller: Controller, limits: HttpLimits) -> None:
        self.c = controller
        self.limits = limits
        self.curves = Curves(controller)
        self._cached: tuple[float, bytes] | None = None
        self._building: asyncio.Task | None = None
        self._checking: asyncio.Task | None = None
        self._records: _Records | None = None
        self._actors: dict[str, tuple[ActorRecord, tuple, str]] = {}  # name -> (record, key, JSON)
        self._nodes: dict[str, tuple[NodeRecord, tuple, str, str]] = {}  # id -> (record, key, JSON around the age)
        self._slice_started = 0.0
        self._encoded = 0  # records encoded since the last pause
        self._background = False  # a check nobody waits for: it takes at most half the loop

    async def body(self, prefix: str = "") -> bytes:
        if prefix:
            return await self._build(prefix)
        loop = asyncio.get_running_loop()
        if self._cached is not None and loop.time() - self._cached[0] < self.limits.status_cache_s:
            return self._cached[1]
        if self._building is None or self._building.done():
            self._building = asyncio.create_task(self._build_cached())
        return await asyncio.shield(self._building)

    async def _build_cached(self) -> bytes:
        body = await self._build("")
        self._cached = (asyncio.get_running_loop().time(), body)
        return body

    async def close(self) -> None:
        for task in (self._building, self._checking):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _pause(self) -> None:
        """Yield to the loop if this slice of work took longer than slice_s. A slice that
        encoded records (a first build, or many changes) is followed by a pause as long,
        so a long build takes at most half the loop and heartbeats keep their share."""
        now = time.perf_counter()
        if now - self._slice_started > self.limits.slice_s:
            await asyncio.sleep(self.limits.slice_s if self._encoded > 16 or self._background else 0)
            self._encoded = 0
            self._slice_started = time.perf_counter()

    def _signature(self) -> tuple:
        c = self.c
        commits = getattr(c.store, "commits", None)
        connected = sum(1 for n in c.nodes.values() if n.connected)  # the one shown field not stored
        return (commits, c.events.seq, len(c.actors), len(c.nodes), len(c.jobs.jobs), connected)

    async def _build(self, prefix: str) -> bytes:
        c = self.c
        self._slice_started = time.perf_counter()
        loop_now = asyncio.get_running_loop().time()
        full = not prefix
        signature = self._signature()
        records = self._records
        if not full or records is None or records.signature != signature or signature[0] is None:
            records = await self._make_records(prefix, signature, loop_now)
            if full:
                self._records = records
        elif loop_now - records.made_at > self.FULL_CHECK_S and (
                self._checking is None or self._checking.done()):
            # Nothing durable changed. Every field shown changes with a durable write or
            # is in the signature, but check every record now and then all the same, in
            # the background (for the next request: this one does not wait for it).
            self._checking = asyncio.create_task(self._recheck(records))
        now = c.clock()
        ages = []
        for i, n in enumerate(records.nodes):
            ages.append(repr(round(max(0.0, now - n.last_heartbeat), 3)))
            if i % 256 == 255:
                await self._pause()
        nodes = "".join(chain.from_iterable(zip(records.node_pieces, ages, strict=False))) + records.node_pieces[-1]
        meshes = dumps([mesh_dict(v) for v in views.list_meshes(c).meshes if v.group.startswith(prefix)])
        return b"".join((b'{"cluster":', dumps(cluster_dict(c.cluster_info())).encode(), b',"nodes":',
                         nodes.encode(), b',"actors":', records.actors, b',"learner_groups":', meshes.encode(),
                         b',"jobs":', records.jobs, records.tail, b"}"))

    async def _recheck(self, old: _Records) -> None:
        self._background = True
        try:
            fresh = await self._make_records("", old.signature, asyncio.get_running_loop().time())
        except Exception:
            log.exception("checking the status records failed")
            return
        finally:
            self._background = False
        if self._records is old:  # not replaced by a newer build meanwhile
            self._records = fresh

    async def _make_records(self, prefix: str, signature: tuple, loop_now: float) -> _Records:
        c = self.c
        full = not prefix
        now = c.clock()
        old_nodes, new_nodes = self._nodes, {}
        node_recs = views.node_records(c)
        pieces, before = [], "["
        for i, n in enumerate(node_recs):
            key = node_key(n)
            hit = old_nodes.get(n.node_id)
            if hit is None or hit[0] is not n or hit[1] != key:
                d = node_dict(n.to_proto(now))
                d["last_heartbeat_age_s"] = 0
                head, _, tail = dumps(d).partition(_AGE + "0")
                hit = (n, key, head + _AGE, tail)
                self._encoded += 1
            new_nodes[n.node_id] = hit
            pieces.append(before + hit[2])
            before = hit[3] + ","
            if i % 32 == 31:
                await self._pause()
        pieces.append((before[:-1] if node_recs else before) + "]")
        old_actors, new_actors = self._actors, {}
        actor_items = views.actor_items(c, prefix)
        parts = []
        for i, (name, r) in enumerate(actor_items):
            key = actor_key(r)
            hit = old_actors.get(name)
            if hit is None or hit[0] is not r or hit[1] != key:
                hit = (r, key, dumps(actor_dict(r.to_proto())))
                self._encoded += 1
            new_actors[name] = hit
            parts.append(hit[2])
            if i % 32 == 31:
                await self._pause()
        actors = ("[" + ",".join(parts) + "]").encode()
        if full:  # the caches now hold exactly the records there are
            self._nodes, self._actors = new_nodes, new_actors
        job_records = views.job_records(c)
        all_actors = actor_items if full else views.actor_items(c)
        jobs = []
        for info in views.job_infos(c, job_records, all_actors):
            jobs.append(dumps(sanitize(job_dict(info))))
            if len(jobs) % 32 == 0:
                await self._pause()
        recent = c.events.recent(RETAINED_EVENTS)
        events = dumps([event_dict(e) for e in recent[-EVENTS_SHOWN:]])
        names = c.actors if full else {n for n, _ in actor_items}
        deaths: dict[str, dict[str, Any]] = {}
        for e in reversed(recent):
            if e.type == pb.EVENT_DIED and e.actor in names and e.actor not in deaths:
                deaths[e.actor] = {"reason": e.message, "incarnation": e.incarnation, "at": e.at}
        await self._pause()
        curves: dict[str, Any] = {}
        for job in sorted(job_records, key=lambda j: j.submitted_at)[-CURVE_JOBS:]:
            curves[job.job_id] = sanitize(self.curves.get(job))
            await self._pause()
        self.curves.prune()
        experiments = dumps(sanitize(experiments_view(all_actors, job_records)))
        tail = (f',"events":{events},"deaths":{dumps(deaths)},"curves":{dumps(curves)}'
                f',"experiments":{experiments}')
        return _Records(signature, loop_now, node_recs, pieces, actors,
                        ("[" + ",".join(jobs) + "]").encode(), tail.encode())


def experiments_view(actors: list[tuple[str, ActorRecord]], jobs: list[JobRecord]) -> list[dict[str, Any]]:
    """Each tuning experiment the cluster runs or ran: its scheduler actor (`NAME/tuner`)
    and its trials (the jobs `NAME-T`, in trial order) with their newest return."""
    trials: dict[str, list[tuple[int, JobRecord]]] = {}
    for job in jobs:
        head, _, index = job.job_id.rpartition("-")
        if head and index.isdigit():
            trials.setdefault(head, []).append((int(index), job))
    out = []
    for name, rec in actors:
        if rec.spec.class_path != TUNER_CLASS or not name.endswith("/tuner"):
            continue
        experiment = name[: -len("/tuner")]
        rows = []
        for _, job in sorted(trials.get(experiment, []), key=lambda t: t[0]):
            rows.append({"trial": job.job_id, "stage": job.stage.value, "iteration": job.iteration,
                         "env_steps_sampled": job.env_steps_sampled,
                         "episode_return_mean": Curves._return(job.metrics)})
        returns = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
        out.append({"name": experiment, "tuner": {"state": rec.state.value, "node_id": rec.node_id,
                                                  "incarnation": rec.incarnation, "restarts": rec.restarts},
                    "trials": rows, "best_return": max(returns) if returns else None})
    return out
