"""`AgentCore`: the state the node agent's jobs share, and what each job offers the others.

The agent (`agent.NodeAgent`) is composed of one class per job, each in its own module:
the coordinator link (`link.CoordinatorLink`), the actors' lifecycle
(`lifecycle.ActorLifecycle`) and the drain (`drain.NodeDrain`); the hang pings
(`hang.HangWatch`), the GPUs (`gpu_slots.GpuSlots`), the warm processes
(`processes.SparePool`) and the log server (`logs`) are objects it holds. The three job
classes are mixins of `NodeAgent` that work on this one state (tests drive them on a
`NodeAgent.__new__` agent with only the state they need) and call one another only
through the abstract methods below: none of them imports another.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import grpc

from ftrl.util.awake_clock import AwakeClock, pause_gap
from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.security import Security
from ftrl.worker.gpu_slots import GpuSlots
from ftrl.worker.hang import HangWatch
from ftrl.worker.local_actor import LocalActor
from ftrl.worker.options import WorkerOptions
from ftrl.worker.processes import SparePool


class AgentCore(ABC):
    """The node agent's shared state (set up by `NodeAgent.__init__`) and its jobs' hooks."""

    # who this node is
    opts: WorkerOptions
    security: Security
    node_id: str
    session_id: str
    address: str  # actors listen on it; the coordinator is told it
    slots: int
    resources: dict[str, float]
    log_dir: Path
    log_port: int  # the log server's, once it listens (0: none)

    # the actors (lifecycle)
    actors: dict[str, LocalActor]
    gpus: GpuSlots
    pool: SparePool
    hang: HangWatch
    _tasks: set[asyncio.Task]  # per-actor tasks (`_spawn`), cancelled at the end

    # the coordinator link
    epoch: int
    lease_until: float  # monotonic: restarts in place are allowed until then
    hb_interval: float
    hb_timeout: float
    restart_policy: RestartPolicy  # the coordinator's, sent at every registration
    connected: asyncio.Event  # set while a session's heartbeats are acknowledged
    _hb_sent: int  # seq of the last heartbeat written (increasing across sessions)
    _hb_acked: int  # seq of the last heartbeat the coordinator acknowledged
    _drain_sent: bool  # this session's stream carried our Drain
    _reports: deque[pb.ActorReport]
    _report_ready: asyncio.Event
    _channel: grpc.aio.Channel
    _stub: pb_grpc.CoordinatorStub
    _md: tuple[tuple[str, str], ...]

    # the drain
    draining: str  # why the node drains; "" while it does not
    _drain_deadline: float  # monotonic end of the drain, once it began
    _drain_requested: asyncio.Event

    # the agent's own run
    # silence of actors and of the coordinator link is counted on this clock: the
    # worker's own pauses (SIGSTOP, a paused VM) are left out (`_tick_awake`)
    _awake: AwakeClock
    _stop: asyncio.Event  # set: the agent stops
    _stopping: bool  # run() is ending: loops must not go on (see _stop_tasks)
    _fatal: BaseException | None  # raised by run() once it stopped

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task:
        """Run `coro` as a task of the agent (cancelled when the agent stops)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _pause_gap(self) -> float:
        """A gap in this loop's ticks longer than this is a pause of the worker (if it
        used no CPU meanwhile); from the shortest silence it judges by."""
        return pause_gap(min(self.opts.actor_hang_timeout_s, self.hb_timeout))

    # ---------------------------------------------------------------- the link's (link.py)

    @abstractmethod
    def lease_valid(self) -> bool:
        """Whether the coordinator's lease holds: an actor may be restarted in place."""

    @abstractmethod
    def _report(self, **fields: Any) -> None:
        """Queue an ActorReport with `fields` for the coordinator."""

    # ---------------------------------------------------------------- the lifecycle's (lifecycle.py)

    @abstractmethod
    def _on_start(self, start: pb.StartActor) -> None:
        """The coordinator's StartActor."""

    @abstractmethod
    def _on_stop(self, stop: pb.StopActor, report: bool = True) -> None:
        """The coordinator's StopActor (`report`: tell it once stopped)."""

    @abstractmethod
    def _begin_stop(self, la: LocalActor, reason: str, drain: bool = False, report: bool = True) -> None:
        """Stop `la` in the background (`drain`: let it run its drain hook first)."""
