"""The node agent's link to the coordinator: registration, one `Connect` stream, reconnects.

Heartbeats and what the outbox holds (actor reports, the node's drain) go up the
stream; start/stop commands come down and go to the node's actors (lifecycle.py). If
the coordinator is gone the agent keeps its actors running and reconnects with capped
backoff; on reconnect it reports what it runs and stops whatever the coordinator fences.
Each acknowledged heartbeat renews the node's lease (lease.py). A drain is told to the
coordinator on the stream too (a `Drain` message, again on every new session).

`CoordinatorLink` owns the session: the channel's stub, the node's epoch, the
heartbeat interval and timeout, whether heartbeats are acknowledged (`connected`) and
which were; it is built from small parts (`NodeActors` is what it needs of the actors)
and driven by `run()`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import grpc

from ftrl._version import __version__
from ftrl.util.awake_clock import AwakeClock
from ftrl.util.backoff import Backoff
from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import (
    ActorUnavailableError,
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
    error_from_rpc,
)
from ftrl.worker.lease import Lease
from ftrl.worker.options import NodeIdentity, WorkerOptions
from ftrl.worker.outbox import Outbox

log = logging.getLogger("ftrl.worker.agent")

REGISTER_TIMEOUT_S = 5.0
HEARTBEAT_INTERVAL_S = 1.0  # until the coordinator says otherwise at registration
HEARTBEAT_TIMEOUT_S = 5.0


class NodeActors(Protocol):
    """What the link needs of the node's actors (`lifecycle.ActorLifecycle`)."""

    def count(self) -> int:
        """How many actors the node runs."""
        ...

    def running(self, epoch: int) -> list[pb.RunningActor]:
        """What the node runs, as a registration tells the coordinator."""
        ...

    def on_start(self, start: pb.StartActor) -> None:
        """The coordinator's StartActor."""
        ...

    def on_stop(self, stop: pb.StopActor, report: bool = True) -> None:
        """The coordinator's StopActor (`report`: tell it once stopped)."""
        ...


class CoordinatorLink:
    """The node's session with the coordinator (see the module docstring).

    `on_heartbeat_timeout(seconds)` is told the coordinator's heartbeat timeout at each
    registration (the agent judges its own pauses by it); `on_end(error)` ends the
    agent: None for the coordinator's shutdown, else an error retrying cannot fix."""

    def __init__(self, node: NodeIdentity, opts: WorkerOptions, stub: pb_grpc.CoordinatorStub,
                 metadata: Sequence[tuple[str, str]], awake: AwakeClock, lease: Lease, outbox: Outbox,
                 actors: NodeActors, on_heartbeat_timeout: Callable[[float], None],
                 on_end: Callable[[BaseException | None], None]) -> None:
        self.node = node
        self.opts = opts
        self._stub = stub
        self._md = tuple(metadata)
        self._awake = awake
        self.lease = lease
        self.outbox = outbox
        self.actors = actors
        self._on_heartbeat_timeout = on_heartbeat_timeout
        self._on_end = on_end
        self.epoch = 0
        self.hb_interval = HEARTBEAT_INTERVAL_S
        self.hb_timeout = HEARTBEAT_TIMEOUT_S
        self.connected = asyncio.Event()  # set while a session's heartbeats are acknowledged
        self._log_port = 0  # the node's log server's, told at registration (0: none)
        self._hb_sent = 0  # seq of the last heartbeat written (increasing across sessions)
        self._hb_acked = 0  # seq of the last heartbeat the coordinator acknowledged
        self._drain_sent = False  # this session's stream carried our Drain
        self._stopping = False  # the agent stops: run() must not go on (stop_reconnecting)

    def stop_reconnecting(self) -> None:
        """The agent is about to cancel `run()` for good. This flag is what ends it: a
        stream that breaks as the cancel arrives makes the session's TaskGroup raise the
        stream's error instead of the cancellation (and Python 3.11 leaves
        `Task.cancelling()` raised after any TaskGroup error, so it cannot tell); an
        orphaned embedded worker once reconnected forever after SIGINT that way."""
        self._stopping = True

    async def run(self, log_port: int = 0) -> None:
        """Register and hold a session, reconnecting, until cancelled or `on_end`
        (`log_port`: where this node serves its actors' logs, 0: nowhere)."""
        self._log_port = log_port
        backoff = Backoff(base=0.2, cap=2.0, jitter=0.2)
        failures, last_error = 0, ""
        first_try, registered = time.monotonic(), False
        while True:
            try:
                reply = await self._register()
                backoff.reset()
                failures, last_error, registered = 0, "", True
                await self._session(reply)
            except (AlreadyExistsError, UnauthenticatedError, PermissionDeniedError,
                    InvalidArgumentError, FailedPreconditionError) as e:
                # Retrying cannot help: a duplicate node id, a wrong token, a bad option,
                # another ftrl version than the coordinator's.
                log.error("cannot join the cluster: %s", e)
                self._on_end(e)
                return
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # any other failure of the link: reconnect
                if not isinstance(e, Exception | BaseExceptionGroup):
                    raise
                if self._stopping:  # the stop's cancel came as the stream broke
                    raise asyncio.CancelledError() from e
                failures += 1
                err = error_from_rpc(e, "coordinator") if isinstance(e, grpc.RpcError) else e
                text = f"{type(err).__name__}: {err}"
                if not registered:
                    waited = time.monotonic() - first_try
                    if waited >= self.opts.connect_timeout_s:
                        self._on_end(ActorUnavailableError(
                            f"could not join the coordinator at {self.opts.coordinator} in "
                            f"{waited:.0f}s (--connect-timeout): {str(err).removeprefix('coordinator unreachable: ')}"))
                        return
                    if failures == 1 or failures % 20 == 0 or text != last_error:
                        log.warning("cannot reach the coordinator at %s (%s); retrying for %.0fs more",
                                    self.opts.coordinator, str(err).removeprefix('coordinator unreachable: '),
                                    self.opts.connect_timeout_s - waited)
                elif failures == 1 or failures % 20 == 0 or text != last_error:
                    log.warning("coordinator link down (%s); keeping %d actors running, retrying",
                                text, self.actors.count())
                last_error = text
            finally:
                self.connected.clear()
            await asyncio.sleep(backoff.next_delay())

    async def _register(self) -> pb.RegisterNodeReply:
        node = self.node
        req = pb.RegisterNodeRequest(
            node_id=node.node_id, session_id=node.session_id, address=node.address,
            resources=node.resources, slots=node.slots, running=self.actors.running(self.epoch),
            hostname=socket.gethostname(), pid=os.getpid(), version=__version__,
            previous_epoch=self.epoch, log_port=self._log_port,
        )
        try:
            reply = await self._stub.RegisterNode(req, timeout=REGISTER_TIMEOUT_S, metadata=self._md)
        except grpc.RpcError as e:
            raise error_from_rpc(e, "coordinator") from None
        self.epoch = reply.node_epoch
        self.hb_interval = reply.heartbeat_interval_s or HEARTBEAT_INTERVAL_S
        self.hb_timeout = reply.heartbeat_timeout_s or HEARTBEAT_TIMEOUT_S
        self._on_heartbeat_timeout(self.hb_timeout)
        try:
            policy = RestartPolicy.from_reply(reply)
        except ValueError as e:
            log.error("coordinator sent a restart policy that makes no sense (%s); keeping %s",
                      e, self.lease.restart_policy)
        else:
            self.lease.follow(policy)
        for stop in reply.stop:
            log.warning("coordinator fenced %s incarnation %d: %s", stop.name, stop.incarnation, stop.reason)
            self.actors.on_stop(stop, report=False)
        log.info("registered as %s (epoch %d) with coordinator %s", node.node_id, self.epoch,
                 reply.coordinator_id)
        return reply

    async def _session(self, reply: pb.RegisterNodeReply) -> None:
        call = self._stub.Connect(metadata=self._md)
        node_id, outbox = self.node.node_id, self.outbox
        sent: dict[int, float] = {}
        # The link's silence counts on the awake clock from `link_since`: the last ack, or
        # the end of a pause of our own after it (acks come every few beats, so what was
        # left of the wait before the pause may not be enough). Once per ack, so that
        # repeated stalls cannot keep a dead link open.
        link_since = self._awake()
        regrace = True
        self._drain_sent = False

        async def writer() -> None:
            while True:
                self._hb_sent += 1
                seq = self._hb_sent
                sent[seq] = time.monotonic()
                await call.write(pb.NodeMessage(
                    node_id=node_id, epoch=self.epoch,
                    heartbeat=pb.Heartbeat(seq=seq, num_actors=self.actors.count())))
                deadline = time.monotonic() + self.hb_interval
                while (remaining := deadline - time.monotonic()) > 0:
                    if outbox.drain_reason and not self._drain_sent:
                        await call.write(pb.NodeMessage(node_id=node_id, epoch=self.epoch,
                                                        drain=pb.Drain(reason=outbox.drain_reason)))
                        self._drain_sent = True
                        log.info("told the coordinator this node drains")
                        continue
                    if not outbox.reports:
                        outbox.ready.clear()
                        try:
                            async with asyncio.timeout(remaining):
                                await outbox.ready.wait()
                        except TimeoutError:
                            break
                        continue
                    report = outbox.reports[0]
                    await call.write(pb.NodeMessage(node_id=node_id, epoch=self.epoch, report=report))
                    outbox.reports.popleft()  # only once written: a broken stream keeps it

        async def reader() -> None:
            nonlocal link_since, regrace
            async for msg in call:
                kind = msg.WhichOneof("body")
                if kind == "ack":
                    t = sent.pop(msg.ack.seq, None)
                    for old in [s for s in sent if s < msg.ack.seq]:
                        del sent[old]
                    if t is not None:
                        self.lease.renew(t, self.hb_timeout)
                        link_since = self._awake()
                        regrace = True
                        self._hb_acked = max(self._hb_acked, msg.ack.seq)
                        self.connected.set()
                elif kind == "start":
                    self.actors.on_start(msg.start)
                elif kind == "stop":
                    self.actors.on_stop(msg.stop)
                elif kind == "shutdown":
                    log.warning("coordinator asked this worker to shut down: %s", msg.shutdown)
                    self._on_end(None)
            raise ConnectionError("coordinator closed the stream")

        async def watchdog() -> None:
            nonlocal link_since, regrace
            while True:
                await asyncio.sleep(self.hb_interval / 2)
                now = self._awake()
                if regrace and self._awake.resumed_at > link_since:
                    link_since, regrace = self._awake.resumed_at, False
                silent = now - link_since
                if silent > self.hb_timeout:
                    raise ConnectionError(f"no heartbeat ack for {silent:.1f}s")

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(writer())
                tg.create_task(reader())
                tg.create_task(watchdog())
        except BaseExceptionGroup as eg:
            # One or more of the three ended the session (the stream broke, the
            # coordinator closed it, acks stopped): the caller reconnects.
            first = eg.exceptions[0]
            if isinstance(first, grpc.RpcError):
                raise ConnectionError(str(error_from_rpc(first, "coordinator"))) from None
            raise ConnectionError(f"{type(first).__name__}: {first}") from None
        finally:
            call.cancel()

    async def flush(self, timeout: float) -> str:
        """Wait (at most `timeout`) until the coordinator has our Drain and every report:
        it acknowledged a heartbeat written after them. Returns what is left unsaid."""
        deadline = time.monotonic() + timeout
        target = None
        while time.monotonic() < deadline:
            if not self.connected.is_set():
                return f"the coordinator is unreachable: {len(self.outbox.reports)} reports unsent"
            if self.outbox.reports or not self._drain_sent:
                target = None
            elif target is None:
                target = self._hb_sent + 1  # the next heartbeat follows them on the stream
            elif self._hb_acked >= target:
                return ""
            await asyncio.sleep(0.05)
        return (f"{len(self.outbox.reports)} reports not acknowledged by the coordinator within "
                f"{timeout:g}s; it will find out when this node is declared lost")
