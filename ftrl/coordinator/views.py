"""Read-only views of the controller's state, as the gRPC API answers them.

One place for "which records, in which order, as which proto": the servicer's
ListNodes / ListActors / ListMeshes / ListJobs and the HTTP `/api/status` both use
these, so the two always show the same thing.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING

from ftrl.coordinator.records import ActorState
from ftrl.wire import ftrl_pb2 as pb

if TYPE_CHECKING:
    from ftrl.coordinator.controller import Controller
    from ftrl.coordinator.jobs import JobRecord
    from ftrl.coordinator.records import ActorRecord, NodeRecord


_first = itemgetter(0)


def node_records(c: Controller) -> list[NodeRecord]:
    """Every node, by node id."""
    return [n for _, n in sorted(c.nodes.items())]


def actor_items(c: Controller, prefix: str = "") -> list[tuple[str, ActorRecord]]:
    """(name, record) of every actor whose name starts with `prefix`, by name."""
    items = sorted(c.actors.items(), key=_first)
    return [(n, r) for n, r in items if n.startswith(prefix)] if prefix else items


def actor_records(c: Controller, prefix: str = "") -> list[ActorRecord]:
    """Every actor whose name starts with `prefix`, by name."""
    return [r for _, r in actor_items(c, prefix)]


def job_records(c: Controller) -> list[JobRecord]:
    """Every job, oldest submission first."""
    return sorted(c.jobs.jobs.values(), key=lambda j: (j.submitted_at, j.job_id))


def job_info(c: Controller, job: JobRecord) -> pb.JobInfo:
    """A job as ListJobs shows it (no config)."""
    return c.jobs.info(job, with_config=False)


def job_infos(c: Controller, jobs: list[JobRecord],
              actors: list[tuple[str, ActorRecord]] | None = None) -> list[pb.JobInfo]:
    """`job_info` of each job, with each job's live actors found in one pass over every
    actor (`actors`: actor_items(c), if the caller has them) instead of one scan per job."""
    live: dict[str, list[str]] = {}
    for name, rec in actors if actors is not None else actor_items(c):
        job_id, sep, _ = name.partition("/")
        if sep and rec.state != ActorState.DEAD:
            live.setdefault(job_id, []).append(name)
    infos = []
    for job in jobs:
        info = c.jobs.info(job, with_config=False, detail=False)
        info.actors.extend(live.get(job.job_id, ()))
        infos.append(info)
    return infos


def list_nodes(c: Controller) -> pb.ListNodesReply:
    now = c.clock()
    return pb.ListNodesReply(nodes=[n.to_proto(now) for n in node_records(c)])


def list_actors(c: Controller, prefix: str = "") -> pb.ListActorsReply:
    return pb.ListActorsReply(actors=[r.to_proto() for r in actor_records(c, prefix)])


def list_meshes(c: Controller) -> pb.ListMeshesReply:
    return pb.ListMeshesReply(meshes=c.meshes.views())


def list_jobs(c: Controller) -> pb.ListJobsReply:
    return pb.ListJobsReply(jobs=job_infos(c, job_records(c)))
