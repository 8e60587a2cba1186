"""Proto records as the plain dicts the SDK, `ftrl status --json` and the coordinator's
`/api/status` promise (one place, so the three always agree)."""

from __future__ import annotations

from typing import Any

from ftrl.wire import ftrl_pb2 as pb

# STARTING is internal detail: users see PENDING until the actor serves.
_ACTOR_STATES = {
    pb.ACTOR_PENDING: "PENDING",
    pb.ACTOR_STARTING: "PENDING",
    pb.ACTOR_ALIVE: "ALIVE",
    pb.ACTOR_RESTARTING: "RESTARTING",
    pb.ACTOR_DEAD: "DEAD",
}
_NODE_STATES = {pb.NODE_ALIVE: "ALIVE", pb.NODE_LOST: "LOST", pb.NODE_EXCLUDED: "EXCLUDED"}


def actor_dict(a: pb.ActorInfo) -> dict[str, Any]:
    return {
        "name": a.name,
        "class_path": a.class_path,
        "node_id": a.node_id,
        "address": a.address,
        "pid": a.pid,
        "state": _ACTOR_STATES.get(a.state, "UNKNOWN"),
        "restarts": a.restarts,
        "incarnation": a.incarnation,
        "max_restarts": a.max_restarts,
        "owner": a.owner,
        "death_reason": a.death_reason,
        "error_type": a.error_type,
        "resources": dict(a.resources),
        "state_since": a.state_since,
    }


def node_dict(n: pb.NodeInfo) -> dict[str, Any]:
    return {
        "node_id": n.node_id,
        "address": n.address,
        "state": _NODE_STATES.get(n.state, "UNKNOWN"),
        "slots": n.slots,
        "actors": list(n.actors),
        "resources": dict(n.resources),
        "available": dict(n.available),
        "failures": n.failures,
        "last_heartbeat_age_s": round(n.last_heartbeat_age_s, 3),
        "epoch": n.epoch,
        "hostname": n.hostname,
        "pid": n.pid,
        "connected": n.connected,
        "log_address": f"{n.address}:{n.log_port}" if n.log_port else "",
    }


def event_dict(e: pb.Event) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "type": pb.EventType.Name(e.type).removeprefix("EVENT_"),
        "actor": e.actor,
        "node_id": e.node_id,
        "incarnation": e.incarnation,
        "at": e.at,
        "message": e.message,
    }


def mesh_member_dict(m: pb.MeshMember) -> dict[str, Any]:
    return {"name": m.name, "incarnation": m.incarnation, "store_address": m.store_address,
            "host": m.host, "rank": m.rank}


def mesh_dict(v: pb.MeshView) -> dict[str, Any]:
    """A learner mesh view: its epoch, members in rank order and waiting joiners."""
    return {
        "group": v.group,
        "epoch": v.epoch,
        "members": [mesh_member_dict(m) for m in v.members],
        "waiting": [mesh_member_dict(m) for m in v.waiting],
        "store_prefix": v.store_prefix,
        "config_hash": v.config_hash,
        "reason": v.reason,
        "seq": v.seq,
        "formed_at": v.formed_at,
    }


def stage_name(value: int) -> str:
    """The stage name of a JobStage enum value (UNKNOWN for one this version lacks)."""
    try:
        return pb.JobStage.Name(value).removeprefix("JOB_")
    except ValueError:
        return "UNKNOWN"


def cluster_dict(info: pb.ClusterInfo) -> dict[str, Any]:
    """The coordinator's own facts (GetClusterInfo)."""
    return {
        "coordinator_id": info.coordinator_id, "version": info.version,
        "uptime_s": info.uptime_s, "heartbeat_interval_s": info.heartbeat_interval_s,
        "heartbeat_timeout_s": info.heartbeat_timeout_s,
        "max_node_failures": info.max_node_failures, "event_seq": info.event_seq,
    }


def _map(data: bytes) -> dict[str, Any]:
    """A msgpack map field ({} when empty or not a map)."""
    if not data:
        return {}
    from ftrl.wire import codec

    value = codec.decode(data)
    return value if isinstance(value, dict) else {}


def job_dict(j: pb.JobInfo) -> dict[str, Any]:
    """A job's record: stage (PENDING|STARTING|RUNNING|RECOVERING|FINISHED|STOPPED|FAILED),
    progress, the newest metrics row, wanted sizes and its live actors."""
    return {
        "job_id": j.job_id,
        "stage": stage_name(j.stage),
        "iteration": j.iteration,
        "env_steps_sampled": j.env_steps_sampled,
        "metrics": _map(j.metrics),
        "actors": list(j.actors),
        "reason": j.reason,
        "output_dir": j.output_dir,
        "num_env_runners": j.num_env_runners,
        "num_learners": j.num_learners,
        "stop_requested": j.stop_requested,
        "last_checkpoint": j.last_checkpoint,
        "seq": j.seq,
        "resume": j.resume,
        "driver_incarnation": j.driver_incarnation,
        "submitted_at": j.submitted_at,
        "stage_since": j.stage_since,
        "config": _map(j.config),
    }
