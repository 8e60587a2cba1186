"""`LocalActor`: the node agent's record of one actor it runs, and of its current incarnation."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ftrl.wire import ftrl_pb2 as pb
from ftrl.worker.processes import ActorProcess


@dataclass(eq=False)
class LocalActor:
    """One named actor on this node and its current incarnation."""

    spec: pb.ActorSpec
    incarnation: int
    restarts: int
    local_until: int
    state: str = "starting"  # starting | alive | waiting | stopping
    host: ActorProcess | None = None
    port: int = 0
    pid: int = 0
    started_at: float = 0.0  # time.monotonic()
    crash_streak: int = 0
    last_pong: float = 0.0  # on the agent's awake clock (its own pauses left out): compare with _awake()
    hung: bool = False
    stop_requested: bool = False
    stop_reason: str = ""
    drain: bool = False  # the stop asked the actor to drain first
    task: asyncio.Task | None = None
    gpu_ids: list[int] = field(default_factory=list)
    gpu_shared: bool = False  # a fraction of gpu_ids[0], not exclusively ours

    @property
    def name(self) -> str:
        """The actor's name (its spec's)."""
        return self.spec.name
