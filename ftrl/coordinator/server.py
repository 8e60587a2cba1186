"""The coordinator's gRPC server: a thin servicer over the Controller.

Each worker holds one `Connect` stream: heartbeats and actor reports go up,
acks and start/stop commands come down. Clients use unary calls plus the
`WatchEvents` server stream. Also serves grpc.health.v1 and reflection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from ftrl.coordinator import views
from ftrl.coordinator.controller import Controller
from ftrl.coordinator.metrics import CoordinatorMetrics
from ftrl.coordinator.records import ActorState
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import ERROR_TYPE_KEY, ConfigError, FtrlError, InvalidArgumentError, status_of
from ftrl.wire.grpcopts import server_options
from ftrl.wire.limits import MAX_CONTROL_MESSAGE, RateLimiter, check_name, peer_host
from ftrl.wire.security import CALLER_HEADER, Security, bind, ensure_local_token, is_loopback
from ftrl.wire.strict import add_servicer, check

log = logging.getLogger(__name__)

_CLOSE = object()
NODE_QUEUE = 100_000
#: How long a connect to a worker whose stream ended may take to tell "gone" (refused).
PROBE_TIMEOUT_S = 1.0
#: When to probe such a worker's port (seconds before each try).
PROBE_DELAYS_S = (0.0, 0.2, 1.0)
MAX_WAIT_S = 300.0


async def _refuses_connections(host: str, port: int) -> bool | None:
    """True if `host:port` refuses a TCP connection (nothing listens), False if it takes
    one, None if there was no answer within PROBE_TIMEOUT_S (or another error)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


def _caller(context: aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CALLER_HEADER and isinstance(value, str):
            return value[:256]
    return ""


def _unary(fn):
    """Map FtrlError (and bugs) to gRPC statuses for a unary handler."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            return await fn(self, request, context)
        except FtrlError as e:
            code, message = status_of(e)
            context.set_trailing_metadata(((ERROR_TYPE_KEY, type(e).__name__),))
            await context.abort(code, message)
        except (asyncio.CancelledError, aio.AbortError):
            raise
        except Exception as e:
            log.exception("%s failed", fn.__name__)
            code, message = status_of(e)
            await context.abort(code, message)

    return wrapper


class _NodeStream:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.queue: asyncio.Queue = asyncio.Queue(NODE_QUEUE)

    def put(self, item) -> bool:
        try:
            self.queue.put_nowait(item)
            return True
        except asyncio.QueueFull:
            return False


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    """Translates RPCs into Controller calls."""

    def __init__(self, controller: Controller, create_rate: float = 200.0, create_burst: float = 2000.0):
        self.c = controller
        self.streams: dict[str, _NodeStream] = {}
        self._probes: set[asyncio.Future] = set()  # of workers whose stream ended
        self._changes: dict[str, asyncio.Event] = {}
        self._create_limit = RateLimiter(create_rate, create_burst, "CreateActor")
        self.metrics = CoordinatorMetrics(controller)  # served at /metrics by ftrl.coordinator.http
        controller.send = self._send
        controller.on_actor_change = functools.partial(self._notify, self._changes)
        controller.on_node_fenced = self._close_stream
        self._mesh_changes: dict[str, asyncio.Event] = {}
        controller.meshes.on_change = functools.partial(self._notify, self._mesh_changes)
        self._job_changes: dict[str, asyncio.Event] = {}
        controller.jobs.on_change = functools.partial(self._notify, self._job_changes)

    # ---------------------------------------------------------------- plumbing

    def _send(self, node_id: str, msg: pb.CoordinatorMessage) -> bool:
        stream = self.streams.get(node_id)
        return stream is not None and stream.put(msg)

    def _close_stream(self, node_id: str) -> None:
        stream = self.streams.pop(node_id, None)
        if stream is not None:
            stream.put(_CLOSE)

    @staticmethod
    def _notify(events: dict[str, asyncio.Event], key: str) -> None:
        """Wake the long-polls waiting on `key` (an actor, a mesh or a job)."""
        event = events.pop(key, None)
        if event is not None:
            event.set()

    @staticmethod
    async def _next_change(events: dict[str, asyncio.Event], key: str, deadline: float) -> bool:
        """Wait for `key`'s next change (a long-poll step): False once `deadline` passed."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        event = events.setdefault(key, asyncio.Event())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), remaining)
        return True

    def _check_caller(self, context: aio.ServicerContext) -> None:
        caller = _caller(context)
        if caller:
            self.c.check_caller(caller)

    # ---------------------------------------------------------------- node agents

    @_unary
    async def RegisterNode(self, request, context):
        return self.c.register_node(request)

    async def Connect(self, request_iterator, context) -> AsyncIterator[pb.CoordinatorMessage]:
        try:
            async with asyncio.timeout(30):
                first = await request_iterator.__anext__()
        except (TimeoutError, StopAsyncIteration):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Connect needs a first message")
            return
        try:
            node_id, epoch = check(first).node_id, first.epoch
            self.c.connect_node(node_id, epoch)
        except FtrlError as e:
            await context.abort(*status_of(e))
            return
        old = self.streams.get(node_id)
        if old is not None:
            old.put(_CLOSE)
        stream = _NodeStream(epoch)
        self.streams[node_id] = stream
        if first.HasField("heartbeat"):
            stream.put(pb.CoordinatorMessage(ack=pb.HeartbeatAck(seq=first.heartbeat.seq)))
        error: list[BaseException] = []
        reader = asyncio.create_task(self._read_node(request_iterator, node_id, epoch, stream, error))
        try:
            while True:
                item = await stream.queue.get()
                if item is _CLOSE:
                    break
                yield item
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if self.streams.get(node_id) is stream:
                del self.streams[node_id]
                self.c.disconnect_node(node_id, epoch)
                self._probes.add(asyncio.ensure_future(self._probe_closed_node(node_id, epoch)))
        if error:
            await context.abort(*status_of(error[0]))

    async def _probe_closed_node(self, node_id: str, epoch: int) -> None:
        """A worker's stream ended: if nothing listens on its port any more, its process
        is gone (and its actors with it: they die with their worker), so the node is
        lost now instead of after the heartbeat timeout. A machine that vanished (no
        answer at all) or a worker still listening is left to the heartbeats. Probed a
        few times (PROBE_DELAYS_S): a process being torn down closes its stream a moment
        before its listening socket."""
        try:
            for delay in PROBE_DELAYS_S:
                await asyncio.sleep(delay)
                node = self.c.nodes.get(node_id)
                if node is None or node.epoch != epoch or node.connected or not node.log_port or not node.address:
                    return  # gone already, registered again, reconnected, or nothing to probe
                refused = await _refuses_connections(node.address.strip("[]"), node.log_port)
                if refused is None:
                    return  # no answer at all: a vanished machine or a cut link, the heartbeats tell
                if refused:
                    self.c.worker_gone(node_id, epoch, "its link closed and nothing listens on its port: "
                                       "the worker process is gone")
                    return
        except FtrlError as e:
            log.debug("probe of node %s: %s", node_id, e)
        finally:
            self._probes.discard(asyncio.current_task())

    async def _read_node(self, requests, node_id: str, epoch: int, stream: _NodeStream, error: list) -> None:
        # Acks renew the worker's lease (send time + 80% of the timeout): one ack
        # every timeout/1.6 intervals keeps the lease unbroken (with the defaults 1 s
        # and 5 s, every 3rd beat) and cuts the coordinator's writes by that much.
        cfg = self.c.config
        ack_every = max(1, int(cfg.heartbeat_timeout_s / (1.6 * cfg.heartbeat_interval_s)))
        observe = self.metrics.heartbeat_seconds.observe
        try:
            async for msg in requests:
                check(msg)
                if msg.node_id != node_id or msg.epoch != epoch:
                    raise InvalidArgumentError("node id and epoch must not change within a stream")
                if msg.HasField("heartbeat"):
                    t0 = time.perf_counter()
                    self.c.heartbeat(node_id, epoch)
                    if msg.heartbeat.seq % ack_every == 0:
                        stream.put(pb.CoordinatorMessage(ack=pb.HeartbeatAck(seq=msg.heartbeat.seq)))
                    observe(time.perf_counter() - t0)
                elif msg.HasField("report"):
                    self.c.report(node_id, epoch, msg.report)
                elif msg.HasField("drain"):
                    self.c.drain_node(node_id, epoch, msg.drain.reason[:500])
        except FtrlError as e:
            error.append(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a broken stream or a bug; the node reconnects
            if not isinstance(e, (grpc.RpcError, aio.AbortError)):
                log.exception("node %s stream failed", node_id)
        stream.put(_CLOSE)

    # ---------------------------------------------------------------- clients

    @_unary
    async def CreateActor(self, request, context):
        self._check_caller(context)
        self._create_limit.take(peer_host(context.peer() or ""))
        spec = request.spec
        if not spec.owner:
            spec.owner = _caller(context).rpartition("@")[0] or "client"
        return self.c.create_actor(spec, request.get_if_exists).to_proto()

    @_unary
    async def KillActor(self, request, context):
        self._check_caller(context)
        check_name(request.name, "actor name")
        rec = self.c.kill_actor(request.name, request.reason[:500])
        return pb.KillActorReply(actor=rec.to_proto())

    @_unary
    async def GetActor(self, request, context):
        self._check_caller(context)
        check_name(request.name, "actor name")
        if not (0.0 <= request.wait_s <= MAX_WAIT_S):
            raise InvalidArgumentError(f"wait_s must be in [0, {MAX_WAIT_S:g}]")
        rec = self.c.get_actor(request.name)
        deadline = asyncio.get_running_loop().time() + request.wait_s
        while request.wait_s > 0:
            if rec.state == ActorState.DEAD:
                break
            if rec.state == ActorState.ALIVE and rec.incarnation >= request.min_incarnation:
                break
            if not await self._next_change(self._changes, request.name, deadline):
                break
            rec = self.c.get_actor(request.name)
        return self.c.actor_info(rec)

    @_unary
    async def ListActors(self, request, context):
        return views.list_actors(self.c, request.prefix)

    @_unary
    async def ListNodes(self, request, context):
        return views.list_nodes(self.c)

    @_unary
    async def GetClusterInfo(self, request, context):
        return self.c.cluster_info()

    # ---------------------------------------------------------------- learner mesh

    @_unary
    async def JoinMesh(self, request, context):
        self._check_caller(context)
        return self.c.meshes.join(request)

    @_unary
    async def GetMesh(self, request, context):
        if not (0.0 <= request.wait_s <= MAX_WAIT_S):
            raise InvalidArgumentError(f"wait_s must be in [0, {MAX_WAIT_S:g}]")
        view = self.c.meshes.view(request.group)
        deadline = asyncio.get_running_loop().time() + request.wait_s
        while view.seq <= request.after_seq and view.seq:  # an unknown mesh (seq 0): answer at once
            if not await self._next_change(self._mesh_changes, request.group, deadline):
                break
            view = self.c.meshes.view(request.group)
        return view

    @_unary
    async def FormMesh(self, request, context):
        self._check_caller(context)
        return self.c.meshes.form(request)

    @_unary
    async def LeaveMesh(self, request, context):
        self._check_caller(context)
        return self.c.meshes.leave(request.group, request.member, request.reason)

    @_unary
    async def ListMeshes(self, request, context):
        return views.list_meshes(self.c)

    # ---------------------------------------------------------------- jobs

    @_unary
    async def SubmitJob(self, request, context):
        self._check_caller(context)
        return self.c.jobs.info(self.c.submit_job(request))

    @_unary
    async def GetJob(self, request, context):
        if not (0.0 <= request.wait_s <= MAX_WAIT_S):
            raise InvalidArgumentError(f"wait_s must be in [0, {MAX_WAIT_S:g}]")
        job = self.c.jobs.get(request.job_id)
        deadline = asyncio.get_running_loop().time() + request.wait_s
        while request.wait_s > 0 and job.seq <= request.after_seq:
            if not await self._next_change(self._job_changes, request.job_id, deadline):
                break
            job = self.c.jobs.get(request.job_id)
        return self.c.jobs.info(job)

    @_unary
    async def ListJobs(self, request, context):
        return views.list_jobs(self.c)

    @_unary
    async def ScaleJob(self, request, context):
        self._check_caller(context)
        return self.c.jobs.info(self.c.scale_job(request))

    @_unary
    async def StopJob(self, request, context):
        self._check_caller(context)
        return self.c.jobs.info(self.c.stop_job(request.job_id, request.reason[:500]))

    @_unary
    async def ReportJob(self, request, context):
        self._check_caller(context)
        return self.c.jobs.info(self.c.report_job(request), detail=False)

    @_unary
    async def ReadmitNode(self, request, context):
        check_name(request.node_id, "node id")
        return self.c.readmit_node(request.node_id).to_proto(self.c.clock())

    async def JobResults(self, request, context):
        """Replay the job's rows after `after_iteration`, then (with follow) stream new
        ones until the job ends. A row a resumed driver reports again under an iteration
        already sent is not sent twice (the stream only moves forward)."""
        try:
            self.c.jobs.get(request.job_id)
        except FtrlError as e:
            await context.abort(*status_of(e))
            return
        after = max(0, request.after_iteration)
        loop = asyncio.get_running_loop()
        while True:
            job = self.c.jobs.jobs.get(request.job_id)
            seq = job.seq if job is not None else 0
            rows = self.c.store.results(request.job_id, after, 1000)
            for iteration, row in rows:
                yield pb.JobResult(iteration=iteration, row=row)
                after = iteration
            if rows:
                continue
            if job is None or job.stage.final or not request.follow:
                return
            while self.c.jobs.jobs.get(request.job_id) is job and job.seq == seq:
                await self._next_change(self._job_changes, request.job_id, loop.time() + 30.0)

    async def WatchEvents(self, request, context):
        after = request.after_seq if request.replay else -1
        sub = self.c.events.subscribe(request.prefix, request.nodes, after)
        try:
            while True:
                event = await sub.queue.get()
                if event is None:
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        "event watcher fell more than 10000 events behind; watch again with after_seq",
                    )
                    return
                yield event
        finally:
            self.c.events.unsubscribe(sub)


class CoordinatorServer:
    """Owns the grpc.aio server, the controller and its tick loop."""

    def __init__(
        self,
        controller: Controller,
        security: Security,
        host: str = "127.0.0.1",
        port: int = 6380,
        tick_interval_s: float = 0.05,
        create_rate: float = 200.0,
        create_burst: float = 2000.0,
    ) -> None:
        self.controller = controller
        self.security = security
        self.host = host
        self.port = port
        self.tick_interval_s = tick_interval_s
        self.servicer = CoordinatorServicer(controller, create_rate, create_burst)
        self._server: aio.Server | None = None
        self._ticker: asyncio.Task | None = None
        self.local_token_file: Path | None = None

    async def start(self) -> int:
        opts = server_options(MAX_CONTROL_MESSAGE)
        opts = [o for o in opts if o[0] != "grpc.max_send_message_length"]
        opts.append(("grpc.max_send_message_length", 64 << 20))
        server = aio.server(options=opts)
        try:
            self.port = bind(server, f"{_bracket(self.host)}:{self.port}", self.security)
        except ConfigError as e:
            if not str(e).startswith("cannot listen"):
                raise
            raise ConfigError(f"{e} (--port {self.port}: is another coordinator running there? "
                              "choose another port, 0 = any free one)") from None
        if self.security.token is None and not self.security.insecure and is_loopback(self.host):
            # No token given on loopback: make one (or reuse the last one for this port)
            # in a file only this user can read, where this user's workers and clients
            # look for it. Other users of the machine get UNAUTHENTICATED.
            token, path = ensure_local_token(self.port)
            self.security = self.security.with_token(token)
            self.local_token_file = path
        token = self.security.token
        add_servicer(pb_grpc.add_CoordinatorServicer_to_server, self.servicer, server,
                     self_checked=frozenset({"Connect"}), token=token)
        health_servicer = health.aio.HealthServicer()
        for service in ("", "ftrl.v1.Coordinator"):
            await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        names = (pb.DESCRIPTOR.services_by_name["Coordinator"].full_name, reflection.SERVICE_NAME,
                 health.SERVICE_NAME)
        add_servicer(reflection_pb2_grpc.add_ServerReflectionServicer_to_server,
                     reflection.aio.ReflectionServicer(names), server, token=token)
        await server.start()
        self._server = server
        self._ticker = asyncio.create_task(self._tick_loop())
        return self.port

    async def _tick_loop(self) -> None:
        lag = self.servicer.metrics.loop_lag_seconds
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.tick_interval_s
            await asyncio.sleep(self.tick_interval_s)
            lag.observe(max(0.0, loop.time() - due))  # how late the loop woke us: its backlog
            try:
                self.controller.tick()
            except Exception:
                log.exception("controller tick failed")

    async def stop(self, grace: float = 1.0) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for node_id in list(self.servicer.streams):
            self.servicer._close_stream(node_id)
        if self._server is not None:
            await self._server.stop(grace)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host

