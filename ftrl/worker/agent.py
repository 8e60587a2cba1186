"""The node agent (`ftrl worker`): registers, heartbeats, runs and watches actors.

`NodeAgent` composes the agent's parts, each in its own module with its own state:
- link.py: registration and one `Connect` stream to the coordinator (heartbeats and
  actor reports up, start/stop commands down), reconnects;
- lease.py: the node's lease (restarts in place allowed until when, by which policy),
  renewed by the link;
- outbox.py: the reports and the drain notice waiting for the coordinator;
- lifecycle.py: actor processes started, stopped, restarted in place (lease allowing)
  and reported; it holds the hang watch (hang.py: an actor that does not answer pings
  for `actor_hang_timeout_s` is killed and restarted), the GPUs (gpu_slots.py) and the
  warm actor processes (processes.py);
- drain.py: the node drains on the worker's first SIGTERM, then the agent stops;
- logs.py: the actors' log files, served to `ftrl logs`.
The agent itself owns what the parts share: who the node is (`NodeIdentity`), the
awake clock silences are counted on, and its own run (stop, fatal error).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from pathlib import Path

import grpc

from ftrl.util.awake_clock import AwakeClock, pause_gap
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import ConfigError
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.limits import MAX_CONTROL_MESSAGE, check_name
from ftrl.wire.security import Security, discover_token, is_loopback, secure_channel
from ftrl.worker.drain import NodeDrain
from ftrl.worker.lease import Lease
from ftrl.worker.lifecycle import ActorLifecycle, describe_exit, log_tail
from ftrl.worker.link import HEARTBEAT_TIMEOUT_S, CoordinatorLink
from ftrl.worker.local_actor import LocalActor
from ftrl.worker.logs import start_log_server
from ftrl.worker.options import NodeIdentity, WorkerOptions
from ftrl.worker.outbox import Outbox

__all__ = ["LocalActor", "NodeAgent", "NodeIdentity", "WorkerOptions", "describe_exit",
           "local_address_towards", "log_tail"]

log = logging.getLogger(__name__)


def local_address_towards(host: str) -> str:
    """The local IP this machine uses to reach `host` (no packet is sent)."""
    if is_loopback(host):
        return "127.0.0.1"
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return s.getsockname()[0]
    return "0.0.0.0"


class NodeAgent:
    """One node's agent: its coordinator link, its actors' lifecycle and its drain, wired
    together (see the module docstring). `run()` runs it; `drain()` drains it."""

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
        node_id = check_name(opts.node_id or f"{socket.gethostname()}-{os.getpid()}", "node id")
        slots = opts.slots or os.cpu_count() or 1
        self.node = NodeIdentity(
            node_id=node_id, session_id=uuid.uuid4().hex,
            address=opts.address or local_address_towards(host.strip("[]")),
            slots=slots, resources={"cpu": float(slots), "gpu": float(opts.gpus), **opts.resources})
        self.log_dir = Path(opts.log_dir or f"/tmp/ftrl-{os.getuid()}/{node_id}/logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # silence of actors and of the coordinator link is counted on this clock: the
        # worker's own pauses (SIGSTOP, a paused VM) are left out (`_tick_awake`)
        self.awake = AwakeClock(self._pause_gap(HEARTBEAT_TIMEOUT_S), what="the worker")
        self._stop = asyncio.Event()  # set: the agent stops
        self._fatal: BaseException | None = None  # raised by run() once it stopped
        lease = Lease()
        self.outbox = Outbox()
        self.lifecycle = ActorLifecycle(self.node, opts, security, self.log_dir, lease, self.outbox,
                                        self.awake)
        self._channel = secure_channel(opts.coordinator, security, channel_options(MAX_CONTROL_MESSAGE))
        self.link = CoordinatorLink(self.node, opts, pb_grpc.CoordinatorStub(self._channel),
                                    security.metadata(), self.awake, lease, self.outbox, self.lifecycle,
                                    on_heartbeat_timeout=self._judge_pauses, on_end=self._end)
        self.node_drain = NodeDrain(opts.drain_timeout_s, self.lifecycle, self.link, self.outbox,
                                    stop=self._stop.set)

    def drain(self, reason: str) -> bool:
        """Start draining this node (see drain.py); False if it drains already."""
        return self.node_drain.drain(reason)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set, the coordinator says shutdown, or a fatal error."""
        stop = stop or self._stop
        node = self.node
        log.info("worker %s (session %s) starting: coordinator %s, actors on %s, resources %s",
                 node.node_id, node.session_id[:8], self.opts.coordinator, node.address, node.resources)
        log_server, log_port = await self._start_log_server()
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(self.link.run(log_port)),
                    tg.create_task(self.lifecycle.run()),
                    tg.create_task(self._tick_awake()),
                    tg.create_task(self.node_drain.run()),
                ]
                stopper = tg.create_task(self._wait_stop(stop))
                await stopper
                self.link.stop_reconnecting()  # before the cancel: see its docstring
                for t in tasks:
                    t.cancel()
        finally:
            await self.lifecycle.close("worker shutting down")
            await self._channel.close()
            if log_server is not None:
                await log_server.stop(0.5)
        if self._fatal is not None:
            raise self._fatal

    async def _start_log_server(self) -> tuple[grpc.aio.Server | None, int]:
        """Serve this node's actor logs (`ftrl logs`) on the advertised address; the port
        goes to the coordinator at registration (0: none). A failure costs `ftrl logs` only."""
        try:
            return await start_log_server(self.log_dir, self.node.address, self.security)
        except Exception as e:
            log.warning("cannot serve actor logs on %s (%s): `ftrl logs` will not reach this node",
                        self.node.address, e)
            return None, 0

    def _end(self, error: BaseException | None) -> None:
        """The link ends the agent: the coordinator's shutdown (None) or a fatal error."""
        if error is not None:
            self._fatal = error
        self._stop.set()

    def _pause_gap(self, heartbeat_timeout_s: float) -> float:
        """A gap in this loop's ticks longer than this is a pause of the worker (if it
        used no CPU meanwhile); from the shortest silence it judges by."""
        return pause_gap(min(self.opts.actor_hang_timeout_s, heartbeat_timeout_s))

    def _judge_pauses(self, heartbeat_timeout_s: float) -> None:
        """The coordinator's heartbeat timeout, at each registration: the awake clock's gap."""
        self.awake.gap_s = self._pause_gap(heartbeat_timeout_s)

    async def _wait_stop(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    async def _tick_awake(self) -> None:
        """Call the awake clock often enough that only a pause leaves a gap."""
        while True:
            await asyncio.sleep(self.awake.gap_s / 3)
            self.awake()
