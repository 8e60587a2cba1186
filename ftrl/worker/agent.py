"""The node agent (`ftrl worker`): registers, heartbeats, runs and watches actors.

- Registration + one `Connect` stream to the coordinator: heartbeats and actor
  reports go up, start/stop commands come down. If the coordinator is gone the
  agent keeps its actors running and reconnects with capped backoff; on
  reconnect it reports what it runs and stops whatever the coordinator fences.
- Each actor incarnation is a child process; its exit is noticed at once by the
  loop's child watcher. A dead actor is restarted in place right away (then
  reported) when three things hold: it has restarts left, the incarnation is in
  the range the coordinator granted this node, and the node's *lease* is valid.
  The lease is the send time of the last acknowledged heartbeat plus 80% of the
  heartbeat timeout: it always runs out before the coordinator can declare this
  node lost, so a partitioned node never restarts an actor that the coordinator
  is moving elsewhere. Without a lease the death is reported and the
  coordinator decides.
- Every alive actor is pinged on its own event loop; one that does not answer
  for `actor_hang_timeout_s` (SIGSTOP, a wedged loop) is killed and restarted.
- Restarts in place follow the coordinator's RestartPolicy (sent at every
  registration), so both sides apply one rule.
- Drain (`drain()`, on the worker's first SIGTERM): tell the coordinator (a
  `Drain` message, again on every new session), which stops each actor here with
  `StopActor(drain=True)` and starts it elsewhere; no local restarts meanwhile.
  If the coordinator is unreachable, or has not moved them within half the drain
  timeout, the worker drains its actors itself. Once none is left (and the
  coordinator acknowledged the reports) the agent stops; at `drain_timeout_s` it
  stops whatever is left at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from ftrl._version import __version__
from ftrl.util.awake_clock import AwakeClock, pause_gap
from ftrl.util.backoff import Backoff
from ftrl.util.gpus import parse_visible_devices
from ftrl.util.logfmt import actor_fields, kv
from ftrl.util.restart_policy import RestartPolicy
from ftrl.util.watchdog import exit_reason
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import (
    ActorUnavailableError,
    AlreadyExistsError,
    ConfigError,
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
    error_from_rpc,
)
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.limits import MAX_CONTROL_MESSAGE, check_name
from ftrl.wire.security import Security, discover_token, is_loopback, secure_channel
from ftrl.worker.logs import log_file, start_log_server
from ftrl.worker.processes import ActorProcess, SparePool

log = logging.getLogger(__name__)

LEASE_FRACTION = 0.8
MAX_PENDING_REPORTS = 10_000
GPU_WAIT_S = 5.0
REGISTER_TIMEOUT_S = 5.0
FLUSH_TIMEOUT_S = 10.0  # at the end of a drain: wait this long at most for the reports' ack


@dataclass
class WorkerOptions:
    coordinator: str
    node_id: str | None = None
    slots: int = 0  # 0: number of CPUs
    gpus: int = 0
    resources: dict[str, float] = field(default_factory=dict)
    address: str | None = None  # host actors listen on and advertise
    actor_hang_timeout_s: float = 10.0
    actor_start_timeout_s: float = 300.0
    spares: int = 1
    preload: str = ""
    log_dir: str | None = None
    log_level: str = "INFO"
    drain_timeout_s: float = 60.0  # SIGTERM: drain for at most this long, then stop at once
    connect_timeout_s: float = 120.0  # give up when the first registration fails this long
    log_max_bytes: int = 50 << 20  # an actor's log is rotated past this size
    log_backups: int = 3  # rotated files kept per actor


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
        return self.spec.name


def describe_exit(code: int | None) -> str:
    if code is None:
        return "unknown exit"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    known = exit_reason(code)
    return f"exited with code {code}" + (f" ({known})" if known else "")


def log_tail(path: Path, lines: int = 12, max_bytes: int = 8192) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def local_address_towards(host: str) -> str:
    """The local IP this machine uses to reach `host` (no packet is sent)."""
    if is_loopback(host):
        return "127.0.0.1"
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return s.getsockname()[0]
    return "0.0.0.0"


class NodeAgent:
    """See the module docstring."""

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
        self.actors: dict[str, LocalActor] = {}
        self.epoch = 0
        self.lease_until = 0.0
        self.hb_interval = 1.0
        self.hb_timeout = 5.0
        self.restart_policy = RestartPolicy()
        # silence of actors and of the coordinator link is counted on this clock: the
        # worker's own pauses (SIGSTOP, a paused VM) are left out (`_tick_awake`)
        self._awake = AwakeClock(self._pause_gap(), what="the worker")
        self.connected = asyncio.Event()
        self.draining = ""  # why the node drains; "" while it does not
        self._drain_deadline = float("inf")  # monotonic end of the drain, once it began
        self._drain_requested = asyncio.Event()
        self._hb_sent = 0  # seq of the last heartbeat written (increasing across sessions)
        self._hb_acked = 0  # seq of the last heartbeat the coordinator acknowledged
        self._drain_sent = False  # this session's stream carried our Drain
        self._reports: deque[pb.ActorReport] = deque(maxlen=MAX_PENDING_REPORTS)
        self._report_ready = asyncio.Event()
        self._free_gpus = list(range(opts.gpus))
        self._gpu_names = self._gpu_names_for(opts.gpus)
        self._tasks: set[asyncio.Task] = set()
        self._stop = asyncio.Event()
        self._stopping = False  # run() is ending: loops must not go on (see _stop_tasks)
        self._fatal: BaseException | None = None
        self._channel = secure_channel(opts.coordinator, security, channel_options(MAX_CONTROL_MESSAGE))
        self._stub = pb_grpc.CoordinatorStub(self._channel)
        self._md = security.metadata()
        self._ping_channels: dict[str, tuple[grpc.aio.Channel, pb_grpc.ActorStub]] = {}
        child_env = {**security.to_env(), "FTRL_COORDINATOR": opts.coordinator}
        self.pool = SparePool(opts.spares, opts.preload, self.log_dir, child_env)
        self.log_port = 0  # set once the log server listens

    # ---------------------------------------------------------------- lifecycle

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
                    tg.create_task(self._ping_loop()),
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

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _stop_all(self, reason: str) -> None:
        for la in list(self.actors.values()):
            la.stop_requested, la.stop_reason, la.drain = True, reason, False
        await asyncio.gather(*(self._stop_actor(la) for la in list(self.actors.values())),
                             return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for channel, _ in self._ping_channels.values():
            await channel.close()
        self._ping_channels.clear()

    # ---------------------------------------------------------------- drain

    def drain(self, reason: str) -> bool:
        """Start draining this node (see the module docstring); False if it drains already."""
        if self.draining:
            return False
        self.draining = reason or "drain requested"
        self._drain_deadline = time.monotonic() + self.opts.drain_timeout_s
        self.pool.size = 0  # no warm spares needed from now on
        self._drain_requested.set()
        self._report_ready.set()  # wakes the writer: the Drain goes out now
        return True

    async def _drain_when_asked(self) -> None:
        """Once drain() is called: wait until no actor is left (bounded), then stop the agent."""
        await self._drain_requested.wait()
        timeout = self.opts.drain_timeout_s
        log.warning("draining (%s): %d actors here; the coordinator moves them away; exiting once "
                    "none is left (at most %gs; a second SIGTERM or SIGINT stops everything now)",
                    self.draining, len(self.actors), timeout)
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                await self._drain_actors(t0 + timeout / 2)
                unsent = await self._flush_reports(FLUSH_TIMEOUT_S)
            log.warning("drained in %.1fs: no actors left%s; exiting", time.monotonic() - t0,
                        f" ({unsent})" if unsent else "")
        except TimeoutError:
            log.error("drain timeout (%gs) passed with %d actors left (%s): stopping them at once",
                      timeout, len(self.actors), ", ".join(sorted(self.actors)))
        self._stop.set()

    async def _drain_actors(self, self_drain_at: float) -> None:
        """Wait until no actor is left. The coordinator stops them (StopActor drain=True);
        if it is unreachable, or after `self_drain_at`, the worker drains them itself."""
        on_our_own = False
        while self.actors:
            if not on_our_own and (not self.connected.is_set() or time.monotonic() >= self_drain_at):
                why = ("the coordinator is unreachable" if not self.connected.is_set() else
                       "the coordinator has not moved them yet")
                log.warning("%s: draining the %d actors here myself (%s)", why, len(self.actors),
                            ", ".join(sorted(self.actors)))
                on_our_own = True
            if on_our_own:
                for la in list(self.actors.values()):
                    if not la.stop_requested:
                        self._begin_stop(la, f"drained: its node drains ({self.draining})", drain=True)
            await asyncio.sleep(0.1)

    async def _flush_reports(self, timeout: float) -> str:
        """Wait (at most `timeout`) until the coordinator has our Drain and every report:
        it acknowledged a heartbeat written after them. Returns what is left unsaid."""
        deadline = time.monotonic() + timeout
        target = None
        while time.monotonic() < deadline:
            if not self.connected.is_set():
                return f"the coordinator is unreachable: {len(self._reports)} reports unsent"
            if self._reports or not self._drain_sent:
                target = None
            elif target is None:
                target = self._hb_sent + 1  # the next heartbeat follows them on the stream
            elif self._hb_acked >= target:
                return ""
            await asyncio.sleep(0.05)
        return (f"{len(self._reports)} reports not acknowledged by the coordinator within "
                f"{timeout:g}s; it will find out when this node is declared lost")

    # ---------------------------------------------------------------- coordinator link

    def lease_valid(self) -> bool:
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

    def _report(self, **fields) -> None:
        """Queue a report for the coordinator. Reports wait across reconnects (the
        coordinator drops duplicates and news about replaced incarnations), so none
        made between a registration and its stream is lost. Bounded: the oldest go."""
        self._reports.append(pb.ActorReport(at=time.time(), **fields))
        self._report_ready.set()

    # ---------------------------------------------------------------- commands

    def _on_start(self, start: pb.StartActor) -> None:
        name = start.spec.name
        existing = self.actors.get(name)
        if existing is not None:
            if existing.incarnation >= start.incarnation and not existing.stop_requested:
                return  # a duplicate command
            existing.stop_requested, existing.stop_reason = True, "replaced by a newer incarnation"
            self._spawn(self._stop_actor(existing))
        la = LocalActor(spec=start.spec, incarnation=start.incarnation, restarts=start.restarts,
                        local_until=start.local_until or start.incarnation + 1)
        self.actors[name] = la
        la.task = self._spawn(self._run_actor(la, start.delay_s))

    def _on_stop(self, stop: pb.StopActor, report: bool = True) -> None:
        la = self.actors.get(stop.name)
        if la is None or (stop.incarnation and la.incarnation > stop.incarnation):
            return
        if stop.drain and not stop.fenced:
            if la.stop_requested:
                return  # stopping already (a drain or a plain stop)
            self._begin_stop(la, f"drained: {stop.reason or 'the coordinator asked'}", drain=True,
                             report=report)
        else:
            self._begin_stop(la, stop.reason, report=report)

    def _begin_stop(self, la: LocalActor, reason: str, drain: bool = False, report: bool = True) -> None:
        la.stop_requested, la.stop_reason, la.drain = True, reason, drain
        self._spawn(self._stop_actor(la, report))

    async def _stop_actor(self, la: LocalActor, report: bool = True) -> None:
        """End the actor's process: a drain lets it run `__ftrl_drain__` first (bounded)."""
        la.state = "stopping"
        drain = la.drain
        if la.host is not None:
            if drain:
                # one deadline for the whole drain: an actor may use what is left of it
                # (its exit after the hook included); after it, _stop_all stops everything
                left = self._drain_deadline - time.monotonic()
                grace = max(1.0, min(left, self.opts.drain_timeout_s))
                log.info("actor %s incarnation %d: asking it to drain (%s; killed if still there "
                         "after %gs)", la.name, la.incarnation, la.stop_reason, grace)
            else:
                grace = 0.5 if la.stop_reason.startswith("fenced") else 2.0
            t0 = time.monotonic()
            code = await la.host.stop(grace_s=grace, drain=drain)
            if drain:
                log.info("actor %s incarnation %d drained in %.2fs (%s)", la.name, la.incarnation,
                         time.monotonic() - t0, describe_exit(code))
                if code != 0:
                    la.stop_reason += f" ({describe_exit(code)})"
        if la.task is not None and not la.task.done():
            la.task.cancel()
        self._forget(la)
        if report:
            self._report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_STOPPED,
                         reason=la.stop_reason)

    def _release_gpus(self, la: LocalActor) -> None:
        if not la.gpu_shared:
            self._free_gpus.extend(la.gpu_ids)
        la.gpu_ids, la.gpu_shared = [], False

    def _forget(self, la: LocalActor) -> None:
        if self.actors.get(la.name) is la:
            del self.actors[la.name]
        self._release_gpus(la)

    # ---------------------------------------------------------------- actor processes

    def _log_path(self, name: str) -> Path:
        return log_file(self.log_dir, name)

    def _kv(self, event: str, la: LocalActor, incarnation: int | None = None, **more: object) -> str:
        """One key=value line about an incarnation of `la` (as the coordinator's events)."""
        fields = actor_fields(self.node_id, la.name, la.incarnation if incarnation is None else incarnation)
        return kv(event=event, **fields, **more)

    async def _run_actor(self, la: LocalActor, delay_s: float = 0.0) -> None:
        """Start one incarnation, report it, and handle its exit."""
        try:
            if delay_s > 0:
                la.state = "waiting"
                await asyncio.sleep(delay_s)
            la.state, la.hung, la.port, la.pid, la.started_at = "starting", False, 0, 0, 0.0
            host = await self.pool.acquire()
            la.host = host
            la.pid = host.pid
            outcome = await self._start_on(la, host)
            if outcome is None:  # started: now wait for the process to end
                code = await host.wait()
                host.close()
                self._on_exit(la, code)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # e.g. no process could be spawned (EAGAIN, EMFILE)
            log.exception("actor %s incarnation %d could not be run", la.name, la.incarnation)
            if la.host is not None:
                la.host.signal(signal.SIGKILL)
            if self.actors.get(la.name) is la and not la.stop_requested:
                self._start_failed(la, type(e).__name__, f"the worker could not run it: {e}")

    async def _start_on(self, la: LocalActor, host: ActorProcess) -> str | None:
        """Assign the actor to `host`; None once it serves, else why it failed."""
        spec = la.spec
        env = {"CUDA_VISIBLE_DEVICES": await self._assign_gpus(la)}
        if spec.env:
            from ftrl.wire import codec

            env.update(codec.decode(spec.env, codec.SMALL_LIMITS))
        assign = {
            "kind": "assign", "spec": spec.SerializeToString(), "incarnation": la.incarnation,
            "restarts": la.restarts, "node_id": self.node_id, "coordinator": self.opts.coordinator,
            "bind_host": self.address, "log_path": str(self._log_path(la.name)), "env": env,
            "log_level": self.opts.log_level, "drain_grace_s": self.opts.drain_timeout_s,
            "name": la.name, "log_max_bytes": self.opts.log_max_bytes, "log_backups": self.opts.log_backups,
            "security": {k: v for k, v in vars(self.security).items() if v is not None},
        }
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(self.opts.actor_start_timeout_s):
                await asyncio.shield(host.ready)
                # kwargs can exceed a pipe's buffer: write off the event loop
                await asyncio.to_thread(host.send, assign)
                msg = await host.read()
        except (EOFError, OSError, ValueError) as e:
            code = await host.wait()
            host.close()
            self._on_exit(la, code, prefix=f"died while starting ({e})")
            return "died"
        except TimeoutError:
            host.signal(signal.SIGKILL)
            await host.wait()
            host.close()
            self._start_failed(la, "TimeoutError",
                               f"did not start within {self.opts.actor_start_timeout_s:g}s")
            return "timeout"
        if (msg.get("name"), msg.get("incarnation")) != (la.name, la.incarnation):
            # the host runs another assignment than ours: never report it as this actor
            log.error("actor %s incarnation %d: host %d answered as %s@%s; killing it", la.name,
                      la.incarnation, host.pid, msg.get("name"), msg.get("incarnation"))
            host.signal(signal.SIGKILL)
            code = await host.wait()
            host.close()
            self._on_exit(la, code, prefix="its host process answered for another actor")
            return "died"
        if msg.get("kind") == "start_failed":
            await host.stop(grace_s=1.0)
            self._start_failed(la, msg.get("error_type", "Exception"), msg.get("message", ""),
                               msg.get("traceback", ""))
            return "failed"
        la.port = int(msg["port"])
        la.state = "alive"
        la.started_at = time.monotonic()
        la.last_pong = self._awake()
        log.info("%s", self._kv("ACTOR_STARTED", la, pid=host.pid, port=la.port,
                                start_s=round(time.monotonic() - t0, 3)))
        self._report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_STARTED,
                     pid=host.pid, address=f"{self.address}:{la.port}")
        return None

    @staticmethod
    def _gpu_names_for(gpus: int) -> list[str]:
        """CUDA_VISIBLE_DEVICES entries of this node's GPUs 0..gpus-1: the worker's own
        CUDA_VISIBLE_DEVICES when it was started with one (SLURM's gres, a shared node)."""
        if gpus < 0:
            raise ConfigError(f"--gpus must be >= 0, got {gpus}")
        if "CUDA_VISIBLE_DEVICES" not in os.environ:
            return [str(i) for i in range(gpus)]
        visible = parse_visible_devices(os.environ["CUDA_VISIBLE_DEVICES"])
        if gpus > len(visible):
            raise ConfigError(f"--gpus {gpus}, but this worker's CUDA_VISIBLE_DEVICES="
                              f"{os.environ['CUDA_VISIBLE_DEVICES']!r} lists {len(visible)}")
        return visible[:gpus]

    async def _assign_gpus(self, la: LocalActor) -> str:
        """CUDA_VISIBLE_DEVICES for the actor: whole GPUs of its own, a shared one for a
        fraction, none for gpu=0. GPUs of a stopping actor are waited for (bounded)."""
        want = float(la.spec.resources.get("gpu", 0.0))
        if want <= 0:
            return ""
        if want < 1:
            load = {i: 0.0 for i in range(self.opts.gpus)}
            for other in self.actors.values():
                for i in other.gpu_ids:
                    load[i] = load.get(i, 0.0) + min(1.0, float(other.spec.resources.get("gpu", 1)))
            if not load:
                raise RuntimeError("this node has no GPU")
            la.gpu_ids, la.gpu_shared = [min(load, key=load.get)], True
            return self._gpu_names[la.gpu_ids[0]]
        need = math.ceil(want)
        deadline = time.monotonic() + GPU_WAIT_S
        while len(self._free_gpus) < need:
            if time.monotonic() > deadline:
                raise RuntimeError(f"needs {need} GPUs, {len(self._free_gpus)} free on this node")
            await asyncio.sleep(0.05)
        la.gpu_ids, self._free_gpus = self._free_gpus[:need], self._free_gpus[need:]
        return ",".join(self._gpu_names[i] for i in la.gpu_ids)

    def _start_failed(self, la: LocalActor, error_type: str, message: str, tb: str = "") -> None:
        log.warning("%s", self._kv("ACTOR_START_FAILED", la, error=error_type, reason=message))
        self._forget(la)
        self._report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_START_FAILED,
                     error_type=error_type, reason=f"{error_type}: {message}"[:4000])

    def _on_exit(self, la: LocalActor, code: int | None, prefix: str = "") -> None:
        if la.stop_requested or self.actors.get(la.name) is not la:
            return
        why = "did not answer pings; killed" if la.hung else describe_exit(code)
        reason = f"{prefix + '; ' if prefix else ''}{why}"
        tail = log_tail(self._log_path(la.name))
        details = f"{reason}\n--- last lines of {self._log_path(la.name)} ---\n{tail}" if tail else reason
        if self.draining and code == 0:
            # ended on its own while the node drains (a SIGTERM to the whole process group
            # or cgroup, as systemd and SLURM send): drained, not a crash
            log.info("%s", self._kv("ACTOR_EXITED", la, restart="no", reason="drained on its own "
                                    "(exited with code 0)"))
            self._forget(la)
            self._report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_STOPPED,
                         reason=f"drained: exited with code 0 while its node drains ({self.draining})")
            return
        policy = self.restart_policy
        alive_for = None if la.started_at == 0.0 else time.monotonic() - la.started_at
        la.crash_streak = policy.next_streak(la.crash_streak, alive_for)
        has_budget = policy.has_budget(la.restarts, la.spec.max_restarts)
        in_range = la.incarnation + 1 < la.local_until
        if has_budget and in_range and self.lease_valid() and not self.draining:
            old = la.incarnation
            self._report(name=la.name, incarnation=old, kind=pb.REPORT_EXITED, exit_code=code or 0,
                         reason=details[:4000], restarting_locally=True, next_incarnation=old + 1)
            la.incarnation, la.restarts = old + 1, la.restarts + 1
            la.host = None
            self._release_gpus(la)
            delay = policy.delay(la.crash_streak)
            log.warning("%s", self._kv("ACTOR_EXITED", la, old, restart="in_place",
                                       next_incarnation=la.incarnation, delay_s=round(delay, 2) or None,
                                       reason=reason))
            la.task = self._spawn(self._run_actor(la, delay))
        else:
            why_not = ("no restarts left" if not has_budget else
                       "no local incarnations left" if not in_range else
                       "the node drains" if self.draining else "no coordinator lease")
            log.warning("%s", self._kv("ACTOR_EXITED", la, restart="no", why=why_not, reason=reason))
            self._forget(la)
            self._report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_EXITED,
                         exit_code=code or 0, reason=details[:4000])

    # ---------------------------------------------------------------- hang detection

    def _ping_stub(self, target: str) -> pb_grpc.ActorStub:
        entry = self._ping_channels.get(target)
        if entry is None:
            channel = secure_channel(target, self.security, channel_options(1 << 20))
            entry = (channel, pb_grpc.ActorStub(channel))
            self._ping_channels[target] = entry
        return entry[1]

    async def _ping_one(self, la: LocalActor, target: str, timeout: float) -> None:
        try:
            reply = await self._ping_stub(target).Ping(
                pb.PingRequest(incarnation=la.incarnation), timeout=timeout, metadata=self._md)
            if reply.incarnation == la.incarnation:
                la.last_pong = self._awake()
        except grpc.RpcError:
            pass
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the loop itself is being stopped
        silent_s = self._awake() - la.last_pong  # the worker's own pauses left out
        if la.state == "alive" and silent_s > self.opts.actor_hang_timeout_s:
            la.hung = True
            log.warning("%s", self._kv("ACTOR_HUNG", la, silent_s=round(silent_s, 1),
                                       reason="did not answer pings: killing it"))
            self._report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_HUNG,
                         reason=f"no ping answer for {self.opts.actor_hang_timeout_s:g}s")
            if la.host is not None:
                la.host.signal(signal.SIGKILL)

    def _pause_gap(self) -> float:
        """A gap in this loop's ticks longer than this is a pause of the worker (if it
        used no CPU meanwhile); from the shortest silence it judges by."""
        return pause_gap(min(self.opts.actor_hang_timeout_s, self.hb_timeout))

    async def _tick_awake(self) -> None:
        """Call the awake clock often enough that only a pause leaves a gap."""
        while True:
            await asyncio.sleep(self._awake.gap_s / 3)
            self._awake()

    async def _ping_loop(self) -> None:
        """Ping every alive actor each round. The channels belong to this loop alone
        (one per actor address); channels of actors gone are closed between rounds."""
        interval = max(0.05, min(1.0, self.opts.actor_hang_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                alive = {f"{self.address}:{la.port}": la for la in self.actors.values()
                         if la.state == "alive" and not la.hung}
                if alive:
                    await asyncio.gather(*(self._ping_one(la, target, interval)
                                           for target, la in alive.items()))
                for target in [t for t in self._ping_channels if t not in alive]:
                    channel, _ = self._ping_channels.pop(target)
                    await channel.close()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let hang detection stop for good
                log.exception("ping round failed")
