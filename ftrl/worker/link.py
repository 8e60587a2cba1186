"""The node agent's link to the coordinator: registration, one `Connect` stream, reconnects.

Heartbeats and actor reports go up the stream, start/stop commands come down. If the
coordinator is gone the agent keeps its actors running and reconnects with capped
backoff; on reconnect it reports what it runs and stops whatever the coordinator fences.
Each acknowledged heartbeat renews the node's *lease*: the heartbeat's send time plus 80%
of the heartbeat timeout. It always runs out before the coordinator can declare this
node lost, so a partitioned node never restarts an actor the coordinator is moving
elsewhere (see lifecycle.py). A drain is told to the coordinator here too (a `Drain`
message, again on every new session).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

import grpc

from ftrl._version import __version__
from ftrl.util.backoff import Backoff
from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    ActorUnavailableError,
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
    error_from_rpc,
)
from ftrl.worker.core import AgentCore

log = logging.getLogger("ftrl.worker.agent")

LEASE_FRACTION = 0.8
MAX_PENDING_REPORTS = 10_000
REGISTER_TIMEOUT_S = 5.0


class CoordinatorLink(AgentCore):
    """The coordinator link of the node agent (see the module docstring)."""

    def lease_valid(self) -> bool:
        """Whether the lease from the last acknowledged heartbeat still holds."""
        return time.monotonic() < self.lease_until

    async def _connection_loop(self) -> None:
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
                self._fatal = e
                self._stop.set()
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
                        self._fatal = ActorUnavailableError(
                            f"could not join the coordinator at {self.opts.coordinator} in "
                            f"{waited:.0f}s (--connect-timeout): {str(err).removeprefix('coordinator unreachable: ')}")
                        self._stop.set()
                        return
                    if failures == 1 or failures % 20 == 0 or text != last_error:
                        log.warning("cannot reach the coordinator at %s (%s); retrying for %.0fs more",
                                    self.opts.coordinator, str(err).removeprefix('coordinator unreachable: '),
                                    self.opts.connect_timeout_s - waited)
                elif failures == 1 or failures % 20 == 0 or text != last_error:
                    log.warning("coordinator link down (%s); keeping %d actors running, retrying",
                                text, len(self.actors))
                last_error = text
            finally:
                self.connected.clear()
            await asyncio.sleep(backoff.next_delay())

    def _running(self) -> list[pb.RunningActor]:
        out = []
        for la in self.actors.values():
            if la.state == "stopping":
                continue
            out.append(pb.RunningActor(
                spec=la.spec, incarnation=la.incarnation, pid=la.pid,
                address=f"{self.address}:{la.port}" if la.state == "alive" else "",
                node_epoch=self.epoch, restarts=la.restarts, local_until=la.local_until,
            ))
        return out

    async def _register(self) -> pb.RegisterNodeReply:
        req = pb.RegisterNodeRequest(
            node_id=self.node_id, session_id=self.session_id, address=self.address,
            resources=self.resources, slots=self.slots, running=self._running(),
            hostname=socket.gethostname(), pid=os.getpid(), version=__version__,
            previous_epoch=self.epoch, log_port=self.log_port,
        )
        try:
            reply = await self._stub.RegisterNode(req, timeout=REGISTER_TIMEOUT_S, metadata=self._md)
        except grpc.RpcError as e:
            raise error_from_rpc(e, "coordinator") from None
        self.epoch = reply.node_epoch
        self.hb_interval = reply.heartbeat_interval_s or 1.0
        self.hb_timeout = reply.heartbeat_timeout_s or 5.0
        self._awake.gap_s = self._pause_gap()
        try:
            policy = RestartPolicy.from_reply(reply)
        except ValueError as e:
            log.error("coordinator sent a restart policy that makes no sense (%s); keeping %s",
                      e, self.restart_policy)
        else:
            if policy != self.restart_policy:
                log.info("restart policy from the coordinator: %s", policy)
            self.restart_policy = policy
        for stop in reply.stop:
            log.warning("coordinator fenced %s incarnation %d: %s", stop.name, stop.incarnation, stop.reason)
            self._on_stop(stop, report=False)
        log.info("registered as %s (epoch %d) with coordinator %s", self.node_id, self.epoch,
                 reply.coordinator_id)
        return reply

    async def _session(self, reply: pb.RegisterNodeReply) -> None:
        call = self._stub.Connect(metadata=self._md)
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
                    node_id=self.node_id, epoch=self.epoch,
                    heartbeat=pb.Heartbeat(seq=seq, num_actors=len(self.actors))))
                deadline = time.monotonic() + self.hb_interval
                while (remaining := deadline - time.monotonic()) > 0:
                    if self.draining and not self._drain_sent:
                        await call.write(pb.NodeMessage(node_id=self.node_id, epoch=self.epoch,
                                                        drain=pb.Drain(reason=self.draining)))
                        self._drain_sent = True
                        log.info("told the coordinator this node drains")
                        continue
                    if not self._reports:
                        self._report_ready.clear()
                        try:
                            async with asyncio.timeout(remaining):
                                await self._report_ready.wait()
                        except TimeoutError:
                            break
                        continue
                    report = self._reports[0]
                    await call.write(pb.NodeMessage(node_id=self.node_id, epoch=self.epoch,
                                                    report=report))
                    self._reports.popleft()  # only once written: a broken stream keeps it

        async def reader() -> None:
            nonlocal link_since, regrace
            async for msg in call:
                kind = msg.WhichOneof("body")
                if kind == "ack":
                    t = sent.pop(msg.ack.seq, None)
                    for old in [s for s in sent if s < msg.ack.seq]:
                        del sent[old]
                    if t is not None:
                        self.lease_until = t + LEASE_FRACTION * self.hb_timeout
                        link_since = self._awake()
                        regrace = True
                        self._hb_acked = max(self._hb_acked, msg.ack.seq)
                        self.connected.set()
                elif kind == "start":
                    self._on_start(msg.start)
                elif kind == "stop":
                    self._on_stop(msg.stop)
                elif kind == "shutdown":
                    log.warning("coordinator asked this worker to shut down: %s", msg.shutdown)
                    self._stop.set()
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

    def _report(self, **fields: Any) -> None:
        """Queue a report for the coordinator. Reports wait across reconnects (the
        coordinator drops duplicates and news about replaced incarnations), so none
        made between a registration and its stream is lost. Bounded: the oldest go."""
        self._reports.append(pb.ActorReport(at=time.time(), **fields))
        self._report_ready.set()
