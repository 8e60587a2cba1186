"""The node agent (`ftrl worker`): registers, heartbeats, runs and watches actors.

`NodeAgent` is the composition of the agent's jobs, one module each:
- link.py: registration and one `Connect` stream to the coordinator (heartbeats and
  actor reports up, start/stop commands down), reconnects, the node's lease;
- lifecycle.py: actor processes started, stopped, restarted in place (lease allowing)
  and reported;
- hang.py: every alive actor pinged; one that does not answer for
  `actor_hang_timeout_s` (SIGSTOP, a wedged loop) is killed and restarted;
- drain.py: the node drains on the worker's first SIGTERM, then the agent stops;
- logs.py: the actors' log files, served to `ftrl logs`;
- gpu_slots.py, processes.py: the node's GPUs, the warm actor processes.
core.py holds the state they share.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import uuid
from pathlib import Path

import grpc

from ftrl.util.awake_clock import AwakeClock
from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import ConfigError
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.limits import MAX_CONTROL_MESSAGE, check_name
from ftrl.wire.security import Security, discover_token, is_loopback, secure_channel
from ftrl.worker.drain import NodeDrain
from ftrl.worker.gpu_slots import GpuSlots
from ftrl.worker.hang import HangWatch
from ftrl.worker.lifecycle import ActorLifecycle, describe_exit, log_tail
from ftrl.worker.link import MAX_PENDING_REPORTS, CoordinatorLink
from ftrl.worker.local_actor import LocalActor
from ftrl.worker.logs import start_log_server
from ftrl.worker.options import WorkerOptions
from ftrl.worker.processes import SparePool

__all__ = ["LocalActor", "NodeAgent", "WorkerOptions", "describe_exit", "local_address_towards", "log_tail"]

log = logging.getLogger(__name__)


def local_address_towards(host: str) -> str:
    """The local IP this machine uses to reach `host` (no packet is sent)."""
    if is_loopback(host):
        return "127.0.0.1"
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return s.getsockname()[0]
    return "0.0.0.0"


class NodeAgent(CoordinatorLink, ActorLifecycle, NodeDrain):
    """One node's agent: its jobs (link, lifecycle, drain) over one state, plus the hang
    watch, GPU slots, spare pool and log server it holds; see the module docstring."""

    def __init__(self, opts: WorkerOptions, security: Security) -> None:
        self.opts = opts
        if security.token is None and not security.insecure:
            found = discover_token(opts.coordinator)  # a coordinator on loopback left one
            if found:
                security = security.with_token(found)
        self.security = security
        host, _, port = opts.coordinator.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--coordinator must be HOST:PORT, got {opts.coordinator!r}")
        self.node_id = check_name(opts.node_id or f"{socket.gethostname()}-{os.getpid()}", "node id")
        self.session_id = uuid.uuid4().hex
        self.address = opts.address or local_address_towards(host.strip("[]"))
        slots = opts.slots or os.cpu_count() or 1
        self.slots = slots
        self.resources = {"cpu": float(slots), "gpu": float(opts.gpus), **opts.resources}
        self.log_dir = Path(opts.log_dir or f"/tmp/ftrl-{os.getuid()}/{self.node_id}/logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.actors = {}
        self.epoch = 0
        self.lease_until = 0.0
        self.hb_interval = 1.0
        self.hb_timeout = 5.0
        self.restart_policy = RestartPolicy()
        self._awake = AwakeClock(self._pause_gap(), what="the worker")
        self.connected = asyncio.Event()
        self.draining = ""
        self._drain_deadline = float("inf")
        self._drain_requested = asyncio.Event()
        self._hb_sent = 0
        self._hb_acked = 0
        self._drain_sent = False
        self._reports = collections.deque(maxlen=MAX_PENDING_REPORTS)
        self._report_ready = asyncio.Event()
        self.gpus = GpuSlots(opts.gpus)
        self._tasks = set()
        self._stop = asyncio.Event()
        self._stopping = False
        self._fatal = None
        self._channel = secure_channel(opts.coordinator, security, channel_options(MAX_CONTROL_MESSAGE))
        self._stub = pb_grpc.CoordinatorStub(self._channel)
        self._md = security.metadata()
        self.hang = HangWatch(self.actors, self.address, security, self._md, self._awake,
                              opts.actor_hang_timeout_s, self._on_hung)
        child_env = {**security.to_env(), "FTRL_COORDINATOR": opts.coordinator}
        self.pool = SparePool(opts.spares, opts.preload, self.log_dir, child_env)
        self.log_port = 0  # set once the log server listens

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set, the coordinator says shutdown, or a fatal error."""
        stop = stop or self._stop
        log.info("worker %s (session %s) starting: coordinator %s, actors on %s, resources %s",
                 self.node_id, self.session_id[:8], self.opts.coordinator, self.address, self.resources)
        log_server = await self._start_log_server()
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(self._connection_loop()),
                    tg.create_task(self.hang.run()),
                    tg.create_task(self._tick_awake()),
                    tg.create_task(self.pool.maintain()),
                    tg.create_task(self._drain_when_asked()),
                ]
                stopper = tg.create_task(self._wait_stop(stop))
                await stopper
                self._stop_tasks(tasks)
        finally:
            await self._stop_all("worker shutting down")
            await self._channel.close()
            if log_server is not None:
                await log_server.stop(0.5)
        if self._fatal is not None:
            raise self._fatal

    async def _start_log_server(self) -> grpc.aio.Server | None:
        """Serve this node's actor logs (`ftrl logs`) on the advertised address; the port
        goes to the coordinator at registration. A failure costs `ftrl logs` only."""
        try:
            server, self.log_port = await start_log_server(self.log_dir, self.address, self.security)
        except Exception as e:
            log.warning("cannot serve actor logs on %s (%s): `ftrl logs` will not reach this node",
                        self.address, e)
            self.log_port = 0
            return None
        return server

    def _stop_tasks(self, tasks: list[asyncio.Task]) -> None:
        """Cancel the agent's loops for good. The flag is what the link loop checks: a
        stream that breaks as the cancel arrives makes the session's TaskGroup raise the
        stream's error instead of the cancellation (and Python 3.11 leaves
        `Task.cancelling()` raised after any TaskGroup error, so it cannot tell); an
        orphaned embedded worker once reconnected forever after SIGINT that way."""
        self._stopping = True
        for t in tasks:
            t.cancel()

    async def _wait_stop(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    async def _stop_all(self, reason: str) -> None:
        for la in list(self.actors.values()):
            la.stop_requested, la.stop_reason, la.drain = True, reason, False
        await asyncio.gather(*(self._stop_actor(la) for la in list(self.actors.values())),
                             return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.hang.close()

    async def _tick_awake(self) -> None:
        """Call the awake clock often enough that only a pause leaves a gap."""
        while True:
            await asyncio.sleep(self._awake.gap_s / 3)
            self._awake()
