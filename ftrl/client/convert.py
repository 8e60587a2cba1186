"""Proto records as plain dicts: kept here for old imports; the code is `ftrl.wire.convert`
(the coordinator's HTTP API uses the same functions)."""

from __future__ import annotations

from ftrl.wire.convert import (
    actor_dict,
    cluster_dict,
    event_dict,
    job_dict,
    mesh_dict,
    mesh_member_dict,
    node_dict,
    stage_name,
)

__all__ = ["actor_dict", "cluster_dict", "event_dict", "job_dict", "mesh_dict", "mesh_member_dict",
           "node_dict", "stage_name"]
