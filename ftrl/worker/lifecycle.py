"""The actors' lifecycle on a node: start, stop and restart of actor processes, and
what the coordinator is told about them.

Each actor incarnation is a child process (from the spare pool); its exit is noticed at
once by the loop's child watcher. A dead actor is restarted in place right away (then
reported) when three things hold: it has restarts left, the incarnation is in the range
the coordinator granted this node, and the node's lease is valid (lease.py). Without a
lease the death is reported and the coordinator decides. Restarts in place follow the
coordinator's RestartPolicy (the lease carries it), so both sides apply one rule. While
the node drains (`begin_drain`) there are no restarts in place.

`ActorLifecycle` owns the node's actors (`actors`), their GPUs, the warm processes they
start in (`processes.SparePool`), the hang watch that pings them (hang.py) and the tasks
that run them; it reads the lease and writes its reports to the outbox (outbox.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from ftrl.util.awake_clock import AwakeClock
from ftrl.util.logfmt import actor_fields, kv
from ftrl.util.watchdog import exit_reason
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.security import Security
from ftrl.worker.gpu_slots import GpuSlots
from ftrl.worker.hang import HangWatch
from ftrl.worker.lease import Lease
from ftrl.worker.local_actor import LocalActor
from ftrl.worker.logs import log_file
from ftrl.worker.options import NodeIdentity, WorkerOptions
from ftrl.worker.outbox import Outbox
from ftrl.worker.processes import ActorProcess, SparePool

log = logging.getLogger("ftrl.worker.agent")


def describe_exit(code: int | None) -> str:
    """A process's exit status in words ("killed by signal SIGKILL", "exited with code 1")."""
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
    """The last `lines` lines of the file at `path` (from its last `max_bytes`; '' if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ActorLifecycle:
    """The node's actors: the coordinator's commands, their processes, their exits (see
    the module docstring). `node` and `opts` say who and how; `awake` is the clock
    silences are counted on (the worker's own pauses left out)."""

    def __init__(self, node: NodeIdentity, opts: WorkerOptions, security: Security, log_dir: Path,
                 lease: Lease, outbox: Outbox, awake: AwakeClock) -> None:
        self.node = node
        self.opts = opts
        self.security = security
        self.log_dir = log_dir
        self.lease = lease
        self.outbox = outbox
        self._awake = awake
        self.actors: dict[str, LocalActor] = {}  # by name; changed here only
        self.draining = ""  # why the node drains; "" while it does not
        self._drain_deadline = float("inf")  # monotonic end of the drain, once it began
        self._tasks: set[asyncio.Task] = set()  # per-actor tasks (`_spawn`), cancelled at the end
        self.gpus = GpuSlots(opts.gpus)
        child_env = {**security.to_env(), "FTRL_COORDINATOR": opts.coordinator}
        self.pool = SparePool(opts.spares, opts.preload, log_dir, child_env)
        self.hang = HangWatch(self.actors, node.address, security, security.metadata(), awake,
                              opts.actor_hang_timeout_s, self._on_hung)

    async def run(self) -> None:
        """Watch the actors for hangs and keep the spares warm, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.hang.run())
            tg.create_task(self.pool.maintain())

    async def close(self, reason: str) -> None:
        """Stop every actor at once (no drain) and end the tasks that ran them (once `run`
        has ended)."""
        for la in list(self.actors.values()):
            la.stop_requested, la.stop_reason, la.drain = True, reason, False
        await asyncio.gather(*(self._stop_actor(la) for la in list(self.actors.values())),
                             return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.hang.close()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task:
        """Run `coro` as a task of the lifecycle (cancelled by `close`)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---------------------------------------------------------------- what the link asks

    def count(self) -> int:
        """How many actors this node runs (stopping ones included)."""
        return len(self.actors)

    def running(self, epoch: int) -> list[pb.RunningActor]:
        """The actors this node runs (not those stopping), as a registration tells them."""
        out = []
        for la in self.actors.values():
            if la.state == "stopping":
                continue
            out.append(pb.RunningActor(
                spec=la.spec, incarnation=la.incarnation, pid=la.pid,
                address=f"{self.node.address}:{la.port}" if la.state == "alive" else "",
                node_epoch=epoch, restarts=la.restarts, local_until=la.local_until,
            ))
        return out

    # ---------------------------------------------------------------- what the drain asks

    def names(self) -> list[str]:
        """The names of the actors on this node, sorted."""
        return sorted(self.actors)

    def begin_drain(self, reason: str, deadline: float) -> None:
        """The node drains from now on (`reason`) until `deadline` (monotonic): no
        restarts in place, an actor ending cleanly counts as drained, and a drain stop
        lets an actor use what is left of the time; no warm spares needed any more."""
        self.draining = reason
        self._drain_deadline = deadline
        self.pool.size = 0

    def drain_remaining(self) -> None:
        """Stop every actor not stopping yet, letting it run its drain hook first."""
        for la in list(self.actors.values()):
            if not la.stop_requested:
                self._begin_stop(la, f"drained: its node drains ({self.draining})", drain=True)

    # ---------------------------------------------------------------- commands

    def on_start(self, start: pb.StartActor) -> None:
        """The coordinator's StartActor (a duplicate is ignored; an older incarnation
        here is replaced)."""
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

    def on_stop(self, stop: pb.StopActor, report: bool = True) -> None:
        """The coordinator's StopActor (`report`: tell it once stopped)."""
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
                # (its exit after the hook included); after it, close() stops everything
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
            self.outbox.report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_STOPPED,
                               reason=la.stop_reason)

    def _forget(self, la: LocalActor) -> None:
        if self.actors.get(la.name) is la:
            del self.actors[la.name]
        self.gpus.release(la)

    # ---------------------------------------------------------------- actor processes

    def _log_path(self, name: str) -> Path:
        return log_file(self.log_dir, name)

    def _kv(self, event: str, la: LocalActor, incarnation: int | None = None, **more: object) -> str:
        """One key=value line about an incarnation of `la` (as the coordinator's events)."""
        fields = actor_fields(self.node.node_id, la.name, la.incarnation if incarnation is None else incarnation)
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
        env = {"CUDA_VISIBLE_DEVICES": await self.gpus.assign(la, self.actors.values())}
        if spec.env:
            from ftrl.wire import codec

            env.update(codec.decode(spec.env, codec.SMALL_LIMITS))
        assign = {
            "kind": "assign", "spec": spec.SerializeToString(), "incarnation": la.incarnation,
            "restarts": la.restarts, "node_id": self.node.node_id, "coordinator": self.opts.coordinator,
            "bind_host": self.node.address, "log_path": str(self._log_path(la.name)), "env": env,
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
        self.outbox.report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_STARTED,
                           pid=host.pid, address=f"{self.node.address}:{la.port}")
        return None

    def _start_failed(self, la: LocalActor, error_type: str, message: str, tb: str = "") -> None:
        log.warning("%s", self._kv("ACTOR_START_FAILED", la, error=error_type, reason=message))
        self._forget(la)
        self.outbox.report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_START_FAILED,
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
            self.outbox.report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_STOPPED,
                               reason=f"drained: exited with code 0 while its node drains ({self.draining})")
            return
        policy = self.lease.restart_policy
        alive_for = None if la.started_at == 0.0 else time.monotonic() - la.started_at
        la.crash_streak = policy.next_streak(la.crash_streak, alive_for)
        has_budget = policy.has_budget(la.restarts, la.spec.max_restarts)
        in_range = la.incarnation + 1 < la.local_until
        if has_budget and in_range and self.lease.valid() and not self.draining:
            old = la.incarnation
            self.outbox.report(name=la.name, incarnation=old, kind=pb.REPORT_EXITED, exit_code=code or 0,
                               reason=details[:4000], restarting_locally=True, next_incarnation=old + 1)
            la.incarnation, la.restarts = old + 1, la.restarts + 1
            la.host = None
            self.gpus.release(la)
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
            self.outbox.report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_EXITED,
                               exit_code=code or 0, reason=details[:4000])

    def _on_hung(self, la: LocalActor, silent_s: float) -> None:
        """`la` did not answer pings (see hang.py): kill it and report it."""
        la.hung = True
        log.warning("%s", self._kv("ACTOR_HUNG", la, silent_s=round(silent_s, 1),
                                   reason="did not answer pings: killing it"))
        self.outbox.report(name=la.name, incarnation=la.incarnation, kind=pb.REPORT_HUNG,
                           reason=f"no ping answer for {self.opts.actor_hang_timeout_s:g}s")
        if la.host is not None:
            la.host.signal(signal.SIGKILL)
