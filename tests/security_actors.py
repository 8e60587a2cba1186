"""Actor classes for the security, fuzzing and partition tests (`tests.security_actors:NAME`)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import ftrl


class FuzzTarget:
    """Every method is safe to call with any arguments: none blocks, sleeps or exits."""

    def __init__(self) -> None:
        self.calls = 0

    def echo(self, value: Any = None) -> Any:
        self.calls += 1
        return value

    def add(self, a: Any = 0, b: Any = 0) -> Any:
        self.calls += 1
        return a + b

    def count(self) -> int:
        return self.calls

    def total(self, arr: Any = None) -> float:
        self.calls += 1
        return float(np.asarray(arr, dtype=np.float64).sum())

    def pid(self) -> int:
        return os.getpid()

    async def aecho(self, value: Any = None) -> Any:
        self.calls += 1
        return value


class Relay:
    """Calls another actor as itself (`name@incarnation`), through the runtime
    context's client: what fencing must refuse once this incarnation is replaced."""

    def __init__(self) -> None:
        self.peer: ftrl.ActorHandle | None = None

    def whoami(self) -> dict[str, Any]:
        ctx = ftrl.get_runtime_context()
        assert ctx is not None
        return {"name": ctx.name, "incarnation": ctx.incarnation, "node_id": ctx.node_id,
                "pid": os.getpid()}

    def connect(self, name: str) -> str:
        """Look `name` up through the coordinator and keep the handle (it caches the address)."""
        ctx = ftrl.get_runtime_context()
        assert ctx is not None
        self.peer = ctx.client().get_actor(name)
        return self.peer.address

    def call_peer(self, method: str, *args: Any) -> dict[str, Any]:
        """Call the peer; the outcome (result or error type and message) as data."""
        assert self.peer is not None, "connect() first"
        try:
            return {"ok": True, "result": self.peer.options(timeout=10.0).call(method, *args)}
        except ftrl.FtrlError as e:
            return {"ok": False, "error": type(e).__name__, "message": str(e)}
