"""`ftrl.AsyncClient` and async actor handles."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc import aio

from ftrl.client.jobs import (
    FINAL_STAGES,
    absolute_path,
    check_job_id,
    job_config,
    job_rows,
    scale_count,
    stage_value,
)
from ftrl.util.backoff import Backoff
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.chunks import assemble
from ftrl.wire.convert import actor_dict, cluster_dict, event_dict, job_dict, mesh_dict, node_dict
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorStartError,
    ActorUnavailableError,
    ConfigError,
    FtrlError,
    FtrlTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    StaleIncarnationError,
    error_from_rpc,
)
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.limits import CHUNK_BYTES, MAX_ACTOR_MESSAGE, MAX_CALL_BYTES, check_method
from ftrl.wire.security import CALLER_HEADER, Security, discover_token, secure_channel

DEFAULT_ADDRESS = "127.0.0.1:6380"
#: Longest a handle trusts a known incarnation without asking the coordinator.
MAX_TRUST_S = 10.0
REVALIDATE_TIMEOUT_S = 2.0
CONTROL_TIMEOUT_S = 10.0
SUBMIT_TIMEOUT_S = 30.0
#: Longest one GetJob long-poll waits at the coordinator.
LONG_POLL_S = 30.0
#: How long `results()` keeps reopening a broken stream before giving up.
RESULTS_RETRY_S = 120.0
_CONTROL_RECV = 64 << 20


def default_address() -> str:
    return os.environ.get("FTRL_COORDINATOR") or DEFAULT_ADDRESS


def _security(token: str | None, security: Security | None) -> Security:
    if security is not None:
        return security.with_token(token) if token else security
    base = Security.from_env()
    return base.with_token(token) if token else base


class AsyncClient:
    """Async client of an ftrl cluster. Create and use it inside one event loop."""

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        *,
        security: Security | None = None,
        caller: str = "",
        timeout: float = CONTROL_TIMEOUT_S,
    ) -> None:
        self.address = address or default_address()
        self.security = _security(token, security)
        if self.security.token is None and not self.security.insecure:
            found = discover_token(self.address)  # a coordinator on loopback left one
            if found:
                self.security = self.security.with_token(found)
        self.caller = caller
        self.timeout = timeout
        self._md = self.security.metadata() + (((CALLER_HEADER, caller),) if caller else ())
        self._channel: aio.Channel | None = None
        self._stub: pb_grpc.CoordinatorStub | None = None
        self._actor_channels: dict[str, tuple[aio.Channel, pb_grpc.ActorStub]] = {}
        # (actor, method) pairs whose replies were large: those calls stream.
        self.large_replies: set[tuple[str, str]] = set()

    # ---------------------------------------------------------------- plumbing

    @property
    def stub(self) -> pb_grpc.CoordinatorStub:
        if self._stub is None:
            opts = channel_options(4 << 20)
            opts = [o for o in opts if o[0] != "grpc.max_receive_message_length"]
            opts.append(("grpc.max_receive_message_length", _CONTROL_RECV))
            self._channel = secure_channel(self.address, self.security, opts)
            self._stub = pb_grpc.CoordinatorStub(self._channel)
        return self._stub

    def actor_stub(self, address: str) -> pb_grpc.ActorStub:
        entry = self._actor_channels.get(address)
        if entry is None:
            # Requests stream in 1 MiB chunks; a unary reply may carry a whole result.
            opts = [o for o in channel_options(MAX_ACTOR_MESSAGE)
                    if o[0] != "grpc.max_receive_message_length"]
            opts.append(("grpc.max_receive_message_length", MAX_CALL_BYTES + CHUNK_BYTES))
            channel = secure_channel(address, self.security, opts)
            entry = (channel, pb_grpc.ActorStub(channel))
            self._actor_channels[address] = entry
        return entry[1]

    async def drop_actor_channel(self, address: str) -> None:
        entry = self._actor_channels.pop(address, None)
        if entry is not None:
            await entry[0].close()

    async def _rpc(self, name: str, request, timeout: float | None = None):
        try:
            return await getattr(self.stub, name)(
                request, timeout=timeout or self.timeout, metadata=self._md)
        except grpc.RpcError as e:
            raise error_from_rpc(e, f"coordinator at {self.address}") from None

    async def close(self) -> None:
        for channel, _ in list(self._actor_channels.values()):
            await channel.close()
        self._actor_channels.clear()
        if self._channel is not None:
            await self._channel.close()
            self._channel, self._stub = None, None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---------------------------------------------------------------- cluster

    async def nodes(self) -> list[dict[str, Any]]:
        """Nodes: dicts with node_id, address, state (ALIVE|LOST|EXCLUDED), slots, actors, ..."""
        reply = await self._rpc("ListNodes", pb.ListNodesRequest())
        return [node_dict(n) for n in reply.nodes]

    async def actors(self, prefix: str = "") -> list[dict[str, Any]]:
        """Actors: dicts with name, class_path, node_id, pid, state, restarts, incarnation, ..."""
        reply = await self._rpc("ListActors", pb.ListActorsRequest(prefix=prefix))
        return [actor_dict(a) for a in reply.actors]

    async def actor(self, name: str) -> dict[str, Any]:
        """One actor's record (NotFoundError if there is none)."""
        return actor_dict(await self._rpc("GetActor", pb.GetActorRequest(name=name)))

    async def cluster_info(self) -> dict[str, Any]:
        return cluster_dict(await self._rpc("GetClusterInfo", pb.ClusterInfoRequest()))

    async def wait_actor(self, name: str, timeout: float = 60.0, min_incarnation: int = 0) -> pb.ActorInfo:
        """Wait until `name` is ALIVE (incarnation >= min_incarnation) or DEAD; returns its info."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            wait = max(0.0, min(remaining, 60.0))
            info = await self._rpc(
                "GetActor",
                pb.GetActorRequest(name=name, wait_s=wait, min_incarnation=min_incarnation),
                timeout=wait + self.timeout,
            )
            if info.state == pb.ACTOR_DEAD:
                return info
            if info.state == pb.ACTOR_ALIVE and info.incarnation >= min_incarnation:
                return info
            if time.monotonic() >= deadline:
                state = actor_dict(info)["state"]
                raise FtrlTimeoutError(
                    f"actor {name} is still {state} after {timeout:g}s"
                    + (f" (needs {dict(info.resources)}; is any node free?)" if state == "PENDING" else "")
                )

    # ---------------------------------------------------------------- actors

    async def create_actor(
        self,
        class_path: str,
        name: str | None = None,
        kwargs: dict[str, Any] | None = None,
        max_restarts: int = -1,
        resources: dict[str, float] | None = None,
        *,
        max_concurrency: int = 1,
        env: dict[str, str] | None = None,
        get_if_exists: bool = False,
        wait: bool = True,
        timeout: float = 120.0,
    ) -> AsyncActorHandle:
        """Create an actor of `class_path` ("pkg.mod:Class") and, by default, wait until it serves.

        max_restarts: restarts in place after failures (-1 = unlimited, 0 = none).
        resources: e.g. {"cpu": 1, "gpu": 0}; default {"cpu": 1}.
        Raises ActorStartError if the class cannot be imported or its constructor raises.
        """
        name = name or f"{class_path.rpartition(':')[2].lower()}-{os.urandom(4).hex()}"
        spec = pb.ActorSpec(
            name=name,
            class_path=class_path,
            kwargs=codec.check_encodable(kwargs or {}, "actor kwargs"),
            max_restarts=max_restarts,
            resources=resources or {},
            max_concurrency=max_concurrency,
            env=codec.encode(env) if env else b"",
        )
        info = await self._rpc("CreateActor", pb.CreateActorRequest(spec=spec, get_if_exists=get_if_exists))
        handle = AsyncActorHandle(self, name, info)
        if wait:
            await handle.wait_alive(timeout)
        return handle

    async def get_actor(self, name: str, strict: bool = False) -> AsyncActorHandle:
        """A handle to an existing actor (NotFoundError if there is none)."""
        info = await self._rpc("GetActor", pb.GetActorRequest(name=name))
        return AsyncActorHandle(self, name, info, strict=strict)

    async def kill_actor(self, name: str, reason: str = "") -> dict[str, Any]:
        """Stop an actor for good; returns its final record."""
        reply = await self._rpc("KillActor", pb.KillActorRequest(name=name, reason=reason))
        return actor_dict(reply.actor)

    # ---------------------------------------------------------------- learner mesh

    async def join_mesh(self, group: str, member: str, incarnation: int, store_address: str,
                        host: str, config_hash: str = "", last_epoch: int = 0) -> dict[str, Any]:
        """Ask to be taken into the mesh's next epoch (see coordinator/rendezvous.py)."""
        return mesh_dict(await self._rpc("JoinMesh", pb.JoinMeshRequest(
            group=group, member=member, incarnation=incarnation, store_address=store_address,
            host=host, config_hash=config_hash, last_epoch=last_epoch)))

    async def get_mesh(self, group: str, after_seq: int = -1, wait_s: float = 0.0) -> dict[str, Any]:
        """The mesh's view; with `wait_s`, wait that long for a change past `after_seq`."""
        wait_s = max(0.0, min(wait_s, 60.0))
        return mesh_dict(await self._rpc(
            "GetMesh", pb.GetMeshRequest(group=group, after_seq=after_seq, wait_s=wait_s),
            timeout=wait_s + self.timeout))

    async def form_mesh(self, group: str, expected_epoch: int, min_size: int = 1,
                        remove: list[str] | None = None, reason: str = "",
                        reform: bool = False) -> dict[str, Any]:
        """Open the next epoch from `expected_epoch` (compare-and-set)."""
        return mesh_dict(await self._rpc("FormMesh", pb.FormMeshRequest(
            group=group, expected_epoch=expected_epoch, min_size=min_size,
            remove=list(remove or ()), reason=reason, reform=reform)))

    async def leave_mesh(self, group: str, member: str, reason: str = "") -> dict[str, Any]:
        return mesh_dict(await self._rpc(
            "LeaveMesh", pb.LeaveMeshRequest(group=group, member=member, reason=reason)))

    async def meshes(self) -> list[dict[str, Any]]:
        """Every learner mesh of the cluster."""
        reply = await self._rpc("ListMeshes", pb.ListMeshesRequest())
        return [mesh_dict(v) for v in reply.meshes]

    async def events(self, prefix: str = "", nodes: bool = False, after_seq: int = -1) -> AsyncIterator[dict]:
        """Stream actor events (and node events if `nodes`) as dicts, as they happen;
        with `after_seq` >= 0, first the retained ones with a larger seq."""
        call = self.stub.WatchEvents(
            pb.WatchEventsRequest(prefix=prefix, nodes=nodes, after_seq=max(0, after_seq),
                                  replay=after_seq >= 0), metadata=self._md)
        try:
            async for event in call:
                yield event_dict(event)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise error_from_rpc(e, f"coordinator at {self.address}") from None
        finally:
            call.cancel()

    # ---------------------------------------------------------------- jobs

    async def submit(self, config: Any, *, job_id: str | None = None, output_dir: str | None = None,
                     resume: bool = False, stop: Any = None) -> str:
        """Submit a job; returns its id (the `JOB/` prefix of its actors).

        config: an AlgorithmConfig, a `ftrl.config.JobSpec`, a dict (a job file's
        content) or the path of a TOML job file; `stop` (dict or StopCriteria) goes over
        its [stop] table. It is validated here first: ConfigError (naming the nearest
        valid key) before any call. output_dir: default under the coordinator's state
        dir; a fresh job refuses one holding checkpoints unless `resume`
        (FailedPreconditionError). AlreadyExistsError: a job of that id is still running.
        """
        job = job_config(config, stop)
        request = pb.SubmitJobRequest(
            job_id=check_job_id(job_id) if job_id else "",
            config=codec.check_encodable(job, "job config"),
            output_dir=absolute_path(output_dir) if output_dir else "",
            resume=resume,
        )
        try:
            info = await self._rpc("SubmitJob", request, timeout=max(self.timeout, SUBMIT_TIMEOUT_S))
        except InvalidArgumentError as e:  # the coordinator refused the config
            raise ConfigError(str(e)) from None
        return info.job_id

    async def job_status(self, job_id: str) -> dict[str, Any]:
        """The job's record: job_id, stage, iteration, env_steps_sampled, metrics (the
        newest row), actors, reason, output_dir, num_env_runners, num_learners,
        last_checkpoint, seq, ... (NotFoundError if there is none)."""
        return job_dict(await self._rpc("GetJob", pb.GetJobRequest(job_id=job_id)))

    async def jobs(self) -> list[dict[str, Any]]:
        """Every job the coordinator knows, as `job_status` dicts."""
        reply = await self._rpc("ListJobs", pb.ListJobsRequest())
        return [job_dict(j) for j in reply.jobs]

    async def wait_job(self, job_id: str, after_seq: int = -1, timeout: float = 60.0) -> dict[str, Any]:
        """The job's record once its `seq` is past `after_seq`, or as it is after `timeout`."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            wait = max(0.0, min(deadline - time.monotonic(), LONG_POLL_S))
            info = await self._rpc("GetJob", pb.GetJobRequest(job_id=job_id, wait_s=wait, after_seq=after_seq),
                                   timeout=wait + self.timeout)
            if info.seq > after_seq or time.monotonic() >= deadline:
                return job_dict(info)

    async def scale(self, job_id: str, env_runners: int | None = None,
                    learners: int | None = None) -> dict[str, Any]:
        """Ask for `env_runners` runners and/or `learners` learners (None: unchanged);
        returns the record once the coordinator accepted it (the driver resizes at its
        next iteration boundary)."""
        if env_runners is None and learners is None:
            raise InvalidArgumentError("scale needs env_runners or learners")
        request = pb.ScaleJobRequest(job_id=job_id, num_env_runners=scale_count("env_runners", env_runners),
                                     num_learners=scale_count("learners", learners))
        return job_dict(await self._rpc("ScaleJob", request))

    async def stop(self, job_id: str, wait: bool = False, timeout: float = 600.0,
                   reason: str = "") -> dict[str, Any]:
        """Ask the job to stop after its current iteration (with a final checkpoint);
        with `wait`, return once it reached a final stage (FtrlTimeoutError after
        `timeout`). Stopping a job that already ended changes nothing."""
        info = job_dict(await self._rpc("StopJob", pb.StopJobRequest(job_id=job_id, reason=reason)))
        deadline = time.monotonic() + timeout
        while wait and info["stage"] not in FINAL_STAGES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FtrlTimeoutError(f"job {job_id} is still {info['stage']} {timeout:g}s after stop")
            info = await self.wait_job(job_id, info["seq"], remaining)
        return info

    async def results(self, job_id: str, follow: bool = True, after_iteration: int = 0,
                      retry_s: float = RESULTS_RETRY_S) -> AsyncIterator[dict[str, Any]]:
        """The job's metrics rows (dicts) in iteration order: those past `after_iteration`,
        then, with `follow`, new ones until the job ends. A broken stream (coordinator
        restart) is reopened past the last row seen, for up to `retry_s` in a row."""
        last = after_iteration
        backoff = Backoff(base=0.2, cap=5.0)
        outage_since: float | None = None
        while True:
            call = self.stub.JobResults(
                pb.JobResultsRequest(job_id=job_id, after_iteration=last, follow=follow),
                metadata=self._md, timeout=None if follow else max(self.timeout, 60.0))
            try:
                async for result in call:
                    outage_since = None
                    backoff.reset()
                    if result.iteration <= last:
                        continue  # replayed across a reconnect
                    last = result.iteration
                    yield codec.decode(result.row)
                if not follow or (await self.job_status(job_id))["stage"] in FINAL_STAGES:
                    return
                error: FtrlError = ActorUnavailableError(f"the results stream of job {job_id} ended early")
            except grpc.RpcError as e:
                error = error_from_rpc(e, f"coordinator at {self.address}")
            except (ActorUnavailableError, FtrlTimeoutError, NotFoundError) as e:  # from job_status
                error = e
            finally:
                call.cancel()
            # NotFoundError after rows came: a coordinator restarted without its state,
            # rebuilding the job from its driver's report (part of the outage)
            lost = isinstance(error, NotFoundError) and (last > after_iteration or outage_since)
            if not (lost or isinstance(error, ActorUnavailableError | FtrlTimeoutError)):
                raise error
            outage_since = outage_since or time.monotonic()
            if time.monotonic() - outage_since > retry_s:
                raise error
            await asyncio.sleep(backoff.next_delay())

    def logs(self, target: str, tail: int = 100, follow: bool = False) -> AsyncIterator[tuple[str, str]]:
        """(actor, line) from the log file of actor `target`, or of each actor of job
        `target`, read from the worker that holds it (also after the actor died): the
        last `tail` lines (-1: all), then with `follow` new lines until cancelled."""
        from ftrl.client.logs import read_logs

        return read_logs(self, target, tail, follow)

    async def readmit_node(self, node_id: str) -> dict[str, Any]:
        """Take an EXCLUDED node back (its failure count starts over); returns its record."""
        return node_dict(await self._rpc("ReadmitNode", pb.ReadmitNodeRequest(node_id=node_id)))

    async def report_job(self, job_id: str, incarnation: int, stage: str, iteration: int,
                         env_steps_sampled: int, rows: list[dict[str, Any]], last_checkpoint: str = "",
                         reason: str = "", timeout: float = 5.0) -> dict[str, Any]:
        """The driver's progress report (stage STARTING, RUNNING or a final one; new
        metrics rows in order). Returns the record, whose num_env_runners,
        num_learners and stop_requested say what the driver should do."""
        report = pb.JobReport(job_id=job_id, incarnation=incarnation, stage=stage_value(stage),
                              iteration=iteration, env_steps_sampled=env_steps_sampled,
                              rows=job_rows(rows), last_checkpoint=last_checkpoint, reason=reason)
        return job_dict(await self._rpc("ReportJob", report, timeout=timeout))


def _encode_call(method: str, args: tuple, kwargs: dict) -> tuple[list, int]:
    try:
        return codec.encode_parts([list(args), kwargs])
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"arguments of {method}() are not msgpack-able: {e}") from None


def _request_chunks(header: pb.CallHeader, parts: list):
    first = True
    for data in codec.iter_chunks(parts, CHUNK_BYTES):
        yield pb.CallChunk(header=header, data=data) if first else pb.CallChunk(data=data)
        first = False


class AsyncActorHandle:
    """A reference to a named actor. Calls carry the incarnation the handle knows.

    Default handles follow restarts: after the actor dies, the call in flight
    raises ActorUnavailableError and the next call waits until a new
    incarnation is ALIVE. `strict=True` handles never switch incarnation on
    their own: a restarted actor raises StaleIncarnationError until the owner
    has resynced it and called `wait_alive()` (what an owner with state to
    restore wants).

    Either way a handle trusts the incarnation it knows only as long as the
    coordinator said it is sure to stay current (`valid_for_s`, until its node
    could be declared lost); after that the next call checks with the
    coordinator first, so a partitioned old copy is not called once fenced. If
    the coordinator cannot be reached the call goes ahead.
    """

    def __init__(self, client: AsyncClient, name: str, info: pb.ActorInfo | None = None,
                 strict: bool = False, timeout: float | None = None, resolve_timeout: float = 60.0) -> None:
        self.client = client
        self.name = name
        self.strict = strict
        self.timeout = timeout
        self.resolve_timeout = resolve_timeout
        self._info = info
        self._usable = info is not None and info.state == pb.ACTOR_ALIVE
        self._failed: tuple[int, str] | None = None
        self._trusted_until = time.monotonic() + min(info.valid_for_s, MAX_TRUST_S) if info else 0.0
        self.incarnation = info.incarnation if info is not None else 0

    def options(self, *, timeout: float | None = None, strict: bool | None = None,
                resolve_timeout: float | None = None) -> AsyncActorHandle:
        """A copy with a per-call timeout and/or strictness."""
        copy = AsyncActorHandle(self.client, self.name, self._info,
                                self.strict if strict is None else strict,
                                timeout if timeout is not None else self.timeout,
                                resolve_timeout if resolve_timeout is not None else self.resolve_timeout)
        copy.incarnation, copy._usable = self.incarnation, self._usable
        copy._trusted_until = self._trusted_until
        return copy

    @property
    def address(self) -> str:
        return self._info.address if self._info is not None else ""

    @property
    def restarts(self) -> int:
        """The runtime's restart count of this actor when this handle last resolved it."""
        return int(self._info.restarts) if self._info is not None else 0

    def __repr__(self) -> str:
        return f"<ActorHandle {self.name} incarnation {self.incarnation}>"

    async def info(self) -> dict[str, Any]:
        return await self.client.actor(self.name)

    async def wait_alive(self, timeout: float = 60.0) -> int:
        """Wait until the actor is ALIVE, adopt that incarnation and return it. After
        this handle saw a call fail, the incarnation it failed on only counts if it
        still answers (the coordinator may not have heard of the death yet)."""
        await self._resolve(timeout, adopt_any=True)
        return self.incarnation

    def _adopt(self, info: pb.ActorInfo, asked: float) -> None:
        self._info, self.incarnation, self._usable, self._failed = info, info.incarnation, True, None
        self._trusted_until = asked + min(info.valid_for_s, MAX_TRUST_S)

    async def _ask_coordinator(self) -> tuple[pb.ActorInfo | None, float]:
        """The actor's record now (and when we asked), or None if the coordinator is
        away: then nothing can be fenced meanwhile, so callers go ahead, and the next
        few calls do not ask again."""
        asked = time.monotonic()
        try:
            info = await self.client._rpc("GetActor", pb.GetActorRequest(name=self.name),
                                          timeout=REVALIDATE_TIMEOUT_S)
        except (ActorUnavailableError, FtrlTimeoutError):
            self._trusted_until = time.monotonic() + REVALIDATE_TIMEOUT_S
            return None, asked
        return info, asked

    async def _revalidate(self) -> None:
        """The trust in the known incarnation ran out: ask the coordinator again."""
        info, asked = await self._ask_coordinator()
        if info is None:
            return
        if info.state == pb.ACTOR_DEAD:
            self._usable = False
            raise _dead_error(info)
        if info.incarnation == self.incarnation and info.address == self.address:
            self._adopt(info, asked)
            return
        self._usable = False
        if self.strict and info.incarnation != self.incarnation:
            raise StaleIncarnationError(
                f"actor {self.name} was replaced (incarnation {self.incarnation} -> "
                f"{info.incarnation}); resync it, then call wait_alive()")

    async def _resolve(self, timeout: float | None = None, adopt_any: bool = False) -> None:
        """Find the incarnation to call. After a failed call, the coordinator may not
        have heard of the death yet: while it still names the address that just
        failed, probe that address, and between probes wait (briefly) for a newer
        incarnation. A slow but live actor is found again by a later probe."""
        timeout = self.resolve_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        failed = self._failed
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            asked = time.monotonic()
            info = await self.client.wait_actor(self.name, remaining)
            if info.state == pb.ACTOR_DEAD:
                raise _dead_error(info)
            if not failed or (info.incarnation, info.address) != failed:
                break
            if await self._answers(info.address, info.incarnation, timeout=min(2.0, remaining)):
                break
            if time.monotonic() >= deadline:
                raise FtrlTimeoutError(
                    f"actor {self.name} incarnation {info.incarnation} at {info.address} does not "
                    f"answer and was not replaced within {timeout:g}s")
            with contextlib.suppress(FtrlTimeoutError):
                await self.client.wait_actor(
                    self.name, min(2.0, max(0.0, deadline - time.monotonic())), info.incarnation + 1)
        if not adopt_any and self.strict and self.incarnation and info.incarnation != self.incarnation:
            raise StaleIncarnationError(
                f"actor {self.name} restarted (incarnation {self.incarnation} -> "
                f"{info.incarnation}); resync it, then call wait_alive()"
            )
        self._adopt(info, asked)

    async def _answers(self, address: str, incarnation: int, timeout: float = 1.0) -> bool:
        try:
            reply = await self.client.actor_stub(address).Ping(
                pb.PingRequest(incarnation=incarnation), timeout=timeout, metadata=self.client._md)
            return reply.incarnation == incarnation
        except grpc.RpcError:
            await self.client.drop_actor_channel(address)
            return False

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call `method(*args, **kwargs)` on the actor and return its result.

        Raises ActorError if the method raised, ActorUnavailableError if the actor
        died or could not be reached during the call, ActorDiedError if it is DEAD.
        """
        check_method(method)
        payload = _encode_call(method, args, kwargs)
        if self._usable and time.monotonic() >= self._trusted_until:
            await self._revalidate()
        if not self._usable:
            await self._resolve()
        try:
            return await self._call_checked(method, payload)
        except StaleIncarnationError as e:
            if e.discarded:  # it ran on a copy fenced meanwhile: the caller decides
                raise
            # Refused before running: safe to retry once on the current incarnation.
            self._usable = False
            if self.strict:
                raise
            await self._resolve()
            return await self._call_checked(method, payload)
        except ActorUnavailableError as e:
            self._usable = False
            self._failed = (self.incarnation, self.address)
            await self.client.drop_actor_channel(self.address)
            if self.strict or not _never_sent(e):
                raise
        # The connection was refused: the call never reached the actor, so it is
        # safe to send it to whatever incarnation serves now.
        await self._resolve()
        return await self._call_checked(method, payload)

    async def _call_checked(self, method: str, payload: tuple[list, int]) -> Any:
        """One call; if it outlived the trust in its callee, the callee must still be
        current before its result is accepted (a fenced copy's result is discarded)."""
        incarnation = self.incarnation
        result = await self._call_once(method, payload)
        if time.monotonic() < self._trusted_until:
            return result
        info, asked = await self._ask_coordinator()
        if info is None:
            return result
        if info.incarnation == incarnation and info.state != pb.ACTOR_DEAD:
            if info.state == pb.ACTOR_ALIVE and info.address == self.address:
                self._adopt(info, asked)
            return result
        self._usable = False
        error = StaleIncarnationError(
            f"discarded the result of {self.name}.{method}(): incarnation {incarnation} was "
            f"fenced while the call ran (now incarnation {info.incarnation}, "
            f"{'DEAD' if info.state == pb.ACTOR_DEAD else 'replaced'})")
        error.discarded = True
        raise error

    async def _call_once(self, method: str, payload: tuple[list, int]) -> Any:
        address = self.address
        parts, total = payload
        header = pb.CallHeader(method=method, incarnation=self.incarnation, total_bytes=total,
                               caller=self.client.caller)
        stub = self.client.actor_stub(address)
        unary = total <= CHUNK_BYTES and (self.name, method) not in self.client.large_replies
        try:
            if unary:
                (data,) = list(codec.iter_chunks(parts, CHUNK_BYTES))
                first = await stub.CallUnary(pb.CallChunk(header=header, data=data),
                                             timeout=self.timeout, metadata=self.client._md)
                if first.HasField("error"):
                    e = first.error
                    raise ActorError(e.type, e.message, e.traceback)
                if len(first.data) > CHUNK_BYTES:
                    self.client.large_replies.add((self.name, method))
                if len(first.data) != first.total_bytes:
                    raise InvalidArgumentError(f"{len(first.data)} of {first.total_bytes} bytes")
                data = first.data
            else:
                data = await self._call_stream(stub, header, parts)
        except StopAsyncIteration:
            raise ActorUnavailableError(f"actor {self.name} closed the call without a reply") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our caller cancelled us
            # gRPC cancels the calls of a channel that is closed under them: another call to
            # this address failed and dropped it. The actor is unreachable, not our caller gone.
            raise ActorUnavailableError(f"call {self.name}.{method}() was cut: the channel to "
                                        f"{address} closed after another call to it failed") from None
        except InvalidArgumentError as e:
            raise ActorUnavailableError(f"reply from {self.name}.{method}() was cut: {e}") from None
        except grpc.RpcError as e:
            err = error_from_rpc(e, f"actor {self.name} (incarnation {self.incarnation}) at {address}")
            if isinstance(err, FtrlTimeoutError):
                err = FtrlTimeoutError(f"call {self.name}.{method}() timed out after {self.timeout:g}s")
            raise err from None
        return codec.decode_parts(data)

    async def _call_stream(self, stub: pb_grpc.ActorStub, header: pb.CallHeader, parts: list) -> bytearray:
        call = stub.Call(_request_chunks(header, parts), timeout=self.timeout, metadata=self.client._md)
        replies = call.__aiter__()
        first = await replies.__anext__()
        if first.HasField("error"):
            e = first.error
            raise ActorError(e.type, e.message, e.traceback)
        return await assemble(first.data, (c.data async for c in replies), first.total_bytes)

    async def state(self) -> Any:
        """The actor's `__ftrl_state__()` (for resyncing a restarted copy)."""
        return await self.call("__ftrl_state__")

    async def restore(self, state: Any) -> Any:
        """Call the actor's `__ftrl_restore__(state)`."""
        return await self.call("__ftrl_restore__", state)


_NOT_SENT = ("failed to connect", "connection refused", "connect failed")


def _never_sent(error: ActorUnavailableError) -> bool:
    """True if gRPC could not even open a connection (the request was not sent)."""
    text = str(error).lower()
    return any(marker in text for marker in _NOT_SENT)


def _dead_error(info: pb.ActorInfo) -> ActorDiedError:
    if info.error_type:
        return ActorStartError(f"actor {info.name} {info.death_reason}", info.error_type)
    return ActorDiedError(f"actor {info.name} is DEAD: {info.death_reason}")


async def first_event(events: AsyncIterator[dict], predicate, timeout: float) -> dict:
    """The first event matching `predicate` within `timeout` seconds."""
    async with asyncio.timeout(timeout):
        async for event in events:
            if predicate(event):
                return event
    raise FtrlTimeoutError("event stream ended")


__all__ = ["AsyncActorHandle", "AsyncClient", "FtrlError", "default_address", "first_event"]
