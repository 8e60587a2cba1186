"""In-process actors behind the same handle interface as `ftrl.client` handles.

Each actor is an object living on its own thread (calls run one at a time, in order).
`LocalClient` creates them (`create_actor`, `kill_actor`) and can simulate failures:
`crash_actor(name)` acts like SIGKILL (pending calls fail with ActorUnavailableError,
then the actor is rebuilt with a new incarnation if it has restarts left, else it is
DEAD); `delay_calls(name, s)` makes it slow. Arguments, kwargs and results pass
through `ftrl.wire.codec`, so code tested against these handles sends only what the
real runtime can carry.

Handle semantics (shared with the real client):
- `call` / `submit` on a handle whose incarnation is older than the actor's raise
  StaleIncarnationError; `wait_alive()` adopts the current incarnation.
- a call to an actor that is restarting raises ActorUnavailableError; to a DEAD one,
  ActorDiedError; user code raising gives ActorError (the actor keeps serving).
- `options(timeout=s)` gives a copy whose calls fail with FtrlTimeoutError after s.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from ftrl.util.futures import settle
from ftrl.util.imports import import_class
from ftrl.wire import codec
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorStartError,
    ActorUnavailableError,
    AlreadyExistsError,
    FtrlTimeoutError,
    NotFoundError,
    StaleIncarnationError,
)


def _construct(class_path: str, kwargs: dict) -> Any:
    """Create the actor object as an actor host does (same import errors)."""
    return import_class(class_path)(**kwargs)


@dataclass
class _Actor:
    name: str
    class_path: str
    kwargs_blob: bytes
    max_restarts: int
    restart_delay_s: float
    state: str = "PENDING"  # PENDING | ALIVE | RESTARTING | DEAD
    incarnation: int = 0
    restarts: int = 0
    instance: Any = None
    executor: cf.ThreadPoolExecutor | None = None
    pending: set = field(default_factory=set)
    delay_s: float = 0.0
    death_reason: str = ""
    cond: threading.Condition = field(default_factory=threading.Condition)


class LocalClient:
    """Creates and controls in-process actors; a stand-in for `ftrl.Client` in tests."""

    def __init__(self, restart_delay_s: float = 0.0):
        self.restart_delay_s = restart_delay_s
        self._actors: dict[str, _Actor] = {}
        self._lock = threading.Lock()

    # ---- the client interface used by the RL room

    def create_actor(
        self,
        class_path: str,
        name: str,
        kwargs: dict | None = None,
        max_restarts: int = 0,
        resources: dict | None = None,
        get_if_exists: bool = False,
        placement_strategy: str = "",
    ) -> LocalHandle:
        """Start an actor (constructing it now; one process, so `placement_strategy` is
        moot). Raises ActorStartError if it cannot."""
        with self._lock:
            existing = self._actors.get(name)
            if existing is not None and existing.state != "DEAD":
                if not get_if_exists:
                    raise AlreadyExistsError(f"actor {name!r} exists")
                return LocalHandle(self, name, existing.incarnation)
            actor = _Actor(name, class_path, codec.encode(kwargs or {}), max_restarts, self.restart_delay_s)
            self._actors[name] = actor
        self._start(actor, first=True)
        if actor.state == "DEAD":
            raise ActorStartError(f"actor {name!r} failed to start: {actor.death_reason}")
        return LocalHandle(self, name, actor.incarnation)

    def get_actor(self, name: str) -> LocalHandle:
        actor = self._get(name)
        return LocalHandle(self, name, actor.incarnation)

    def kill_actor(self, name: str, reason: str = "") -> None:
        """Stop an actor for good (DEAD, no restart)."""
        actor = self._actors.get(name)
        if actor is None:
            return
        self._crash(actor, restart=False, reason=f"killed: {reason}" if reason else "killed")

    def actors(self) -> list[dict[str, Any]]:
        return [
            {
                "name": a.name,
                "class_path": a.class_path,
                "state": a.state,
                "restarts": a.restarts,
                "incarnation": a.incarnation,
            }
            for a in self._actors.values()
        ]

    def close(self) -> None:
        for actor in list(self._actors.values()):
            self._crash(actor, restart=False, reason="client closed")

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def client(self) -> LocalClient:
        """So a LocalClient can stand in for a cluster object (`cluster.client()`)."""
        return self

    # ---- failure injection

    def crash_actor(self, name: str) -> None:
        """Simulate the actor's process dying: restart it in place if it has restarts left."""
        self._crash(self._get(name), restart=True, reason="crashed")

    def delay_calls(self, name: str, seconds: float) -> None:
        """Make every later call to the actor sleep `seconds` first (0 to stop)."""
        self._get(name).delay_s = seconds

    # ---- internals

    def _get(self, name: str) -> _Actor:
        actor = self._actors.get(name)
        if actor is None:
            raise NotFoundError(f"no actor named {name!r}")
        return actor

    def _start(self, actor: _Actor, first: bool) -> None:
        """Construct a new instance on a fresh thread; on failure restart or die."""
        while True:
            executor = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"actor-{actor.name}")
            kwargs = codec.decode(actor.kwargs_blob)
            try:
                instance = executor.submit(_construct, actor.class_path, kwargs).result()
            except Exception as e:
                executor.shutdown(wait=False)
                with actor.cond:
                    actor.death_reason = f"{type(e).__name__}: {e}"
                    if first or actor.restarts >= actor.max_restarts:
                        actor.state = "DEAD"
                        actor.cond.notify_all()
                        return
                    actor.restarts += 1
                continue
            with actor.cond:
                if actor.state == "DEAD":  # killed while constructing
                    executor.shutdown(wait=False)
                    return
                actor.instance = instance
                actor.executor = executor
                actor.incarnation += 1
                actor.state = "ALIVE"
                actor.cond.notify_all()
            return

    def _crash(self, actor: _Actor, restart: bool, reason: str) -> None:
        with actor.cond:
            if actor.state == "DEAD":
                return
            executor, pending = actor.executor, list(actor.pending)
            actor.executor = None
            actor.instance = None
            actor.pending = set()
            can_restart = restart and actor.restarts < actor.max_restarts
            actor.state = "RESTARTING" if can_restart else "DEAD"
            actor.death_reason = reason
            if can_restart:
                actor.restarts += 1
            actor.cond.notify_all()
        for fut in pending:
            if not fut.done():
                fut.set_exception(ActorUnavailableError(f"actor {actor.name} died ({reason}) during the call"))
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if can_restart:
            threading.Thread(target=self._restart_later, args=(actor,), daemon=True).start()

    def _restart_later(self, actor: _Actor) -> None:
        if actor.restart_delay_s:
            time.sleep(actor.restart_delay_s)
        self._start(actor, first=False)

    def _submit(self, name: str, incarnation: int, method: str, args: tuple, kwargs: dict) -> cf.Future:
        actor = self._get(name)
        outer: cf.Future = cf.Future()
        blob = codec.check_encodable([list(args), kwargs], f"arguments of {name}.{method}")
        with actor.cond:
            if actor.state == "DEAD":
                outer.set_exception(ActorDiedError(f"actor {name} is DEAD: {actor.death_reason}"))
                return outer
            if actor.state != "ALIVE":
                outer.set_exception(ActorUnavailableError(f"actor {name} is {actor.state}"))
                return outer
            if incarnation != actor.incarnation:
                outer.set_exception(
                    StaleIncarnationError(
                        f"actor {name} is at incarnation {actor.incarnation}; the handle knows "
                        f"{incarnation}: resync it, then call wait_alive()"
                    )
                )
                return outer
            if method.startswith("_"):
                outer.set_exception(ActorError("InvalidArgumentError", f"method {method!r} is private"))
                return outer
            instance, executor = actor.instance, actor.executor
            actor.pending.add(outer)
        assert executor is not None

        def run() -> None:
            if actor.delay_s:
                time.sleep(actor.delay_s)
            if outer.done():
                return
            call_args, call_kwargs = codec.decode(blob)
            try:
                fn = getattr(instance, method)
                result = codec.decode(codec.encode(fn(*call_args, **call_kwargs)))
            except Exception as e:
                err: BaseException = ActorError(type(e).__name__, str(e), traceback.format_exc())
                settle(outer, error=err)
            else:
                settle(outer, result=result)
            with actor.cond:
                actor.pending.discard(outer)

        try:
            executor.submit(run)
        except RuntimeError:  # shut down by a crash in between
            settle(outer, error=ActorUnavailableError(f"actor {name} died"))
        return outer

    def _wait_alive(self, name: str, timeout: float) -> int:
        actor = self._get(name)
        deadline = time.monotonic() + timeout
        with actor.cond:
            while actor.state != "ALIVE":
                if actor.state == "DEAD":
                    raise ActorDiedError(f"actor {name} is DEAD: {actor.death_reason}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FtrlTimeoutError(f"actor {name} not ALIVE within {timeout}s")
                actor.cond.wait(remaining)
            return actor.incarnation


class LocalHandle:
    """A handle to a LocalClient actor (same interface as the runtime's handles)."""

    def __init__(self, client: LocalClient, name: str, incarnation: int, timeout: float | None = None):
        self._client = client
        self.name = name
        self.incarnation = incarnation
        self._timeout = timeout

    def options(self, timeout: float | None = None, strict: bool = True) -> LocalHandle:
        """A copy whose calls time out after `timeout` seconds (local handles are always
        strict: they never follow a restart on their own)."""
        return _OptionHandle(self, timeout)

    def submit(self, method: str, *args: Any, **kwargs: Any) -> cf.Future:
        fut = self._client._submit(self.name, self.incarnation, method, args, kwargs)
        if self._timeout is not None and not fut.done():
            timer = threading.Timer(
                self._timeout,
                settle,
                args=(fut,),
                kwargs={"error": FtrlTimeoutError(f"{self.name}.{method}: deadline of {self._timeout}s exceeded")},
            )
            timer.daemon = True
            timer.start()
            fut.add_done_callback(lambda _: timer.cancel())
        return fut

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.submit(method, *args, **kwargs).result()

    def wait_alive(self, timeout: float) -> int:
        """Block until the actor is ALIVE; adopt and return its incarnation."""
        self.incarnation = self._client._wait_alive(self.name, timeout)
        return self.incarnation

    def __repr__(self) -> str:
        return f"LocalHandle({self.name!r}, incarnation={self.incarnation})"


class _OptionHandle(LocalHandle):
    """Shares the incarnation of the handle it came from."""

    def __init__(self, base: LocalHandle, timeout: float | None):
        self._base = base
        super().__init__(base._client, base.name, base.incarnation, timeout)

    @property  # type: ignore[override]
    def incarnation(self) -> int:
        return self._base.incarnation

    @incarnation.setter
    def incarnation(self, value: int) -> None:
        if hasattr(self, "_base"):
            self._base.incarnation = value
