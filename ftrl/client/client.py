"""`ftrl.Client`: the synchronous SDK. It drives an AsyncClient on a background loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ftrl.client.aio import AsyncActorHandle, AsyncClient
from ftrl.wire.errors import ResourceExhaustedError
from ftrl.wire.security import Security

EVENTS_BUFFER = 10_000


class _LoopThread:
    """One daemon thread running an event loop, shared by every sync client."""

    _lock = threading.Lock()
    _instance: _LoopThread | None = None

    def __init__(self) -> None:
        try:
            import uvloop

            self.loop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="ftrl-client-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @classmethod
    def get(cls) -> _LoopThread:
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = cls()
            return cls._instance

    def submit(self, coro) -> concurrent.futures.Future:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a sync ftrl.Client cannot be used from its own loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


class Client:
    """Synchronous client of an ftrl cluster.

    `Client(address="host:6380", token=None)`; the token can also come from
    FTRL_TOKEN / FTRL_TOKEN_FILE. Methods mirror AsyncClient.
    """

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        *,
        security: Security | None = None,
        caller: str = "",
        timeout: float = 10.0,
    ) -> None:
        self._loop = _LoopThread.get()
        self._aio = AsyncClient(address, token, security=security, caller=caller, timeout=timeout)
        self.address = self._aio.address

    def _run(self, coro, timeout: float | None = None) -> Any:
        return self._loop.submit(coro).result(timeout)

    def close(self) -> None:
        self._run(self._aio.close())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def nodes(self) -> list[dict[str, Any]]:
        """Nodes: dicts with node_id, address, state (ALIVE|LOST|EXCLUDED), slots, actors, ..."""
        return self._run(self._aio.nodes())

    def actors(self, prefix: str = "") -> list[dict[str, Any]]:
        """Actors: dicts with name, class_path, node_id, pid, state, restarts, incarnation, ..."""
        return self._run(self._aio.actors(prefix))

    def actor(self, name: str) -> dict[str, Any]:
        return self._run(self._aio.actor(name))

    def cluster_info(self) -> dict[str, Any]:
        return self._run(self._aio.cluster_info())

    def create_actor(self, class_path: str, name: str | None = None, kwargs: dict | None = None,
                     max_restarts: int = -1, resources: dict[str, float] | None = None,
                     **options: Any) -> ActorHandle:
        """Create an actor and wait until it serves (see AsyncClient.create_actor)."""
        handle = self._run(self._aio.create_actor(class_path, name, kwargs, max_restarts, resources, **options))
        return ActorHandle(self, handle)

    def get_actor(self, name: str, strict: bool = False) -> ActorHandle:
        return ActorHandle(self, self._run(self._aio.get_actor(name, strict)))

    def kill_actor(self, name: str, reason: str = "") -> dict[str, Any]:
        """Stop an actor for good; returns its final record."""
        return self._run(self._aio.kill_actor(name, reason))

    def wait_actor(self, name: str, timeout: float = 60.0, min_incarnation: int = 0) -> dict[str, Any]:
        """Wait until the actor is ALIVE (incarnation >= min_incarnation) or DEAD."""
        from ftrl.wire.convert import actor_dict

        return actor_dict(self._run(self._aio.wait_actor(name, timeout, min_incarnation)))

    def join_mesh(self, group: str, member: str, incarnation: int, store_address: str,
                  host: str, config_hash: str = "", last_epoch: int = 0) -> dict[str, Any]:
        """Ask to be taken into a learner mesh's next epoch."""
        return self._run(self._aio.join_mesh(group, member, incarnation, store_address, host,
                                             config_hash, last_epoch))

    def get_mesh(self, group: str, after_seq: int = -1, wait_s: float = 0.0) -> dict[str, Any]:
        """A learner mesh's view; with `wait_s`, wait for a change past `after_seq`."""
        return self._run(self._aio.get_mesh(group, after_seq, wait_s))

    def form_mesh(self, group: str, expected_epoch: int, min_size: int = 1,
                  remove: list[str] | None = None, reason: str = "", reform: bool = False) -> dict[str, Any]:
        """Open a learner mesh's next epoch from `expected_epoch` (compare-and-set)."""
        return self._run(self._aio.form_mesh(group, expected_epoch, min_size, remove, reason, reform))

    def leave_mesh(self, group: str, member: str, reason: str = "") -> dict[str, Any]:
        return self._run(self._aio.leave_mesh(group, member, reason))

    def meshes(self) -> list[dict[str, Any]]:
        """Every learner mesh: group, epoch, members (rank order), waiting."""
        return self._run(self._aio.meshes())

    def events(self, prefix: str = "", nodes: bool = False, after_seq: int = -1,
               timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Iterate over events as they happen; stops after `timeout` s without one.

        Events are buffered (EVENTS_BUFFER); a consumer that falls that far behind
        gets ResourceExhaustedError (watch again with `after_seq`) instead of
        stalling the client's event loop."""
        q: queue.Queue = queue.Queue(EVENTS_BUFFER)
        finished = threading.Event()
        failure: list[BaseException] = []

        async def pump() -> None:
            try:
                async for event in self._aio.events(prefix, nodes, after_seq):
                    try:
                        q.put_nowait(event)
                    except queue.Full:
                        failure.append(ResourceExhaustedError(
                            f"event consumer fell {EVENTS_BUFFER} events behind; watch again "
                            f"with after_seq={event['seq'] - 1}"))
                        return
            except Exception as e:  # handed to the consumer
                failure.append(e)
            finally:
                finished.set()

        future = self._loop.submit(pump())
        try:
            idle_since = time.monotonic()
            while True:
                try:
                    item = q.get(timeout=0.1)
                except queue.Empty:
                    if finished.is_set() and q.empty():
                        if failure:
                            raise failure[0] from None
                        return
                    if timeout is not None and time.monotonic() - idle_since > timeout:
                        return
                    continue
                idle_since = time.monotonic()
                yield item
        finally:
            future.cancel()

    # ---------------------------------------------------------------- jobs

    def submit(self, config: Any, *, job_id: str | None = None, output_dir: str | None = None,
               resume: bool = False, stop: Any = None) -> str:
        """Submit a job (an AlgorithmConfig, JobSpec, dict or TOML path); returns its id.
        See AsyncClient.submit."""
        return self._run(self._aio.submit(config, job_id=job_id, output_dir=output_dir,
                                          resume=resume, stop=stop))

    def job_status(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """The job's record: job_id, stage, iteration, env_steps_sampled, metrics, actors, ...
        `timeout`: the call's (default: the client's)."""
        return self._run(self._aio.job_status(job_id, timeout))

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the coordinator knows."""
        return self._run(self._aio.jobs())

    def wait_job(self, job_id: str, after_seq: int = -1, timeout: float = 60.0) -> dict[str, Any]:
        """The job's record once its seq is past `after_seq`, or as it is after `timeout`."""
        return self._run(self._aio.wait_job(job_id, after_seq, timeout))

    def scale(self, job_id: str, env_runners: int | None = None, learners: int | None = None) -> dict[str, Any]:
        """Ask for a number of env runners and/or learners; returns once accepted."""
        return self._run(self._aio.scale(job_id, env_runners, learners))

    def stop(self, job_id: str, wait: bool = False, timeout: float = 600.0, reason: str = "") -> dict[str, Any]:
        """Stop the job after its current iteration; with `wait`, until it ended."""
        return self._run(self._aio.stop(job_id, wait, timeout, reason))

    def results(self, job_id: str, follow: bool = True, after_iteration: int = 0,
                retry_s: float | None = None) -> Iterator[dict[str, Any]]:
        """Iterate over the job's metrics rows (see AsyncClient.results)."""
        kwargs = {} if retry_s is None else {"retry_s": retry_s}
        return self._iterate(self._aio.results(job_id, follow, after_iteration, **kwargs))

    def logs(self, target: str, tail: int = 100, follow: bool = False) -> Iterator[tuple[str, str]]:
        """(actor, line) from the logs of actor or job `target` (see AsyncClient.logs)."""
        return self._iterate(self._aio.logs(target, tail, follow))

    def _iterate(self, items: AsyncIterator[Any]) -> Iterator[Any]:
        """An async iterator of the client's loop, iterated from this thread; closed
        (bounded) when the caller stops early or Ctrl-C interrupts a wait."""
        future: concurrent.futures.Future | None = None
        try:
            while True:
                future = self._loop.submit(_next_or_none(items))
                item = future.result()
                future = None
                if item is None:
                    return
                yield item
        finally:
            if future is not None:
                future.cancel()
            with contextlib.suppress(Exception):
                self._loop.submit(items.aclose()).result(5.0)

    def readmit_node(self, node_id: str) -> dict[str, Any]:
        """Take an EXCLUDED node back; returns its record."""
        return self._run(self._aio.readmit_node(node_id))

    def report_job(self, job_id: str, incarnation: int, stage: str, iteration: int,
                   env_steps_sampled: int, rows: list[dict[str, Any]], last_checkpoint: str = "",
                   reason: str = "", timeout: float = 5.0) -> dict[str, Any]:
        """The driver's progress report; returns the record (wanted sizes, stop_requested)."""
        return self._run(self._aio.report_job(job_id, incarnation, stage, iteration, env_steps_sampled,
                                              rows, last_checkpoint, reason, timeout))


async def _next_or_none(rows: AsyncIterator[Any]) -> Any:
    """The next row, or None at the end (a StopAsyncIteration cannot cross a Future)."""
    try:
        return await rows.__anext__()
    except StopAsyncIteration:
        return None


class ActorHandle:
    """Synchronous view of an AsyncActorHandle."""

    def __init__(self, client: Client, handle: AsyncActorHandle) -> None:
        self._client = client
        self._h = handle

    @property
    def name(self) -> str:
        return self._h.name

    @property
    def incarnation(self) -> int:
        return self._h.incarnation

    @property
    def address(self) -> str:
        return self._h.address

    @property
    def restarts(self) -> int:
        """The runtime's restart count of this actor when this handle last resolved it."""
        return self._h.restarts

    def __repr__(self) -> str:
        return f"<ActorHandle {self.name} incarnation {self.incarnation}>"

    def options(self, **options: Any) -> ActorHandle:
        """A copy with `timeout=` (per call, seconds), `strict=` or `resolve_timeout=`."""
        return ActorHandle(self._client, self._h.options(**options))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a method and wait for its result (see AsyncActorHandle.call)."""
        return self._client._run(self._h.call(method, *args, **kwargs))

    def submit(self, method: str, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Start a call and return a Future of its result."""
        return self._client._loop.submit(self._h.call(method, *args, **kwargs))

    def wait_alive(self, timeout: float = 60.0) -> int:
        """Wait until ALIVE, adopt the current incarnation and return it."""
        return self._client._run(self._h.wait_alive(timeout))

    def info(self) -> dict[str, Any]:
        return self._client._run(self._h.info())

    def state(self) -> Any:
        return self._client._run(self._h.state())

    def restore(self, state: Any) -> Any:
        return self._client._run(self._h.restore(state))

    def kill(self, reason: str = "") -> dict[str, Any]:
        return self._client.kill_actor(self.name, reason)
