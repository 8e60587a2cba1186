"""What code running inside an actor knows about itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ftrl.wire.security import Security

if TYPE_CHECKING:
    from ftrl.client.client import Client


@dataclass
class RuntimeContext:
    """Identity of the current actor process and a way back to the cluster."""

    name: str
    incarnation: int
    node_id: str
    coordinator: str
    restarts: int = 0
    host: str = "127.0.0.1"  # the address this actor's node serves on
    security: Security = field(default_factory=Security)
    _client: Client | None = field(default=None, repr=False)

    @property
    def caller(self) -> str:
        """How this actor identifies itself on calls (`name@incarnation`)."""
        return f"{self.name}@{self.incarnation}"

    def client(self) -> Client:
        """A (cached) sync client to the coordinator that calls as this actor."""
        if self._client is None:
            from ftrl.client.client import Client

            self._client = Client(self.coordinator, security=self.security, caller=self.caller)
        return self._client


_current: RuntimeContext | None = None


def get_runtime_context() -> RuntimeContext | None:
    """The context of the actor this code runs in, or None outside an actor."""
    return _current


def set_runtime_context(ctx: RuntimeContext | None) -> None:
    global _current
    _current = ctx
