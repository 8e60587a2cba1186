"""The client room: Client, AsyncClient, actor handles, the embedded local cluster."""

from ftrl.client.aio import AsyncActorHandle, AsyncClient
from ftrl.client.client import ActorHandle, Client
from ftrl.client.context import RuntimeContext, get_runtime_context

__all__ = [
    "ActorHandle",
    "AsyncActorHandle",
    "AsyncClient",
    "Client",
    "RuntimeContext",
    "get_runtime_context",
]
