"""The client room: Client, AsyncClient, actor handles, the jobs API, the embedded local
cluster."""

from ftrl.client.aio import AsyncActorHandle, AsyncClient
from ftrl.client.client import ActorHandle, Client
from ftrl.client.context import RuntimeContext, get_runtime_context
from ftrl.client.jobs import FINAL_STAGES as FINAL_JOB_STAGES
from ftrl.client.jobs import JOB_STAGES, job_to_dict

__all__ = [
    "ActorHandle",
    "AsyncActorHandle",
    "AsyncClient",
    "Client",
    "FINAL_JOB_STAGES",
    "JOB_STAGES",
    "RuntimeContext",
    "get_runtime_context",
    "job_to_dict",
]
