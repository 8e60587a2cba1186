"""The actor process: `python -m ftrl.worker.host --ctl-in FD --ctl-out FD`.

A host starts as a *spare*: it imports the heavy modules the worker asked it to
preload (grpc, numpy, torch...) and then blocks on its control pipe. When the
worker assigns it an actor it imports the class, constructs it, starts its own
grpc.aio server and reports the port. Spares make a restart cost a constructor
call instead of a Python start plus imports.

A spare comes to life in one of two ways, and both run the same code once the
imports are done (`serve_spare`):

- cold: `python -m ftrl.worker.host --ctl-in FD --ctl-out FD --preload MODULES`, a
  whole interpreter start plus the imports (`preload_modules`): ~0.4 CPU-s with
  grpc/numpy/gymnasium, ~1.9 CPU-s with torch. The worker's first actor's spare and
  every spare while the fork server is unavailable start this way.
- forked: the worker's fork server (`ftrl.worker.zygote`) imported the same modules
  once and forks a copy of itself per spare (a few ms of CPU); the copy resets what a
  fork shares, then calls `prepare_spare` and `serve_spare` like a cold one.

The process dies with its worker (PR_SET_PDEATHSIG) and also exits when the
control pipe closes.

Signals, once the actor serves: SIGINT stops it now (the worker's plain stop);
SIGTERM drains it (the worker's drain stop, or a pre-emption notice sent to the
whole process group): the object's optional `__ftrl_drain__()` runs like a call
(off the event loop, calls and pings still answered) for at most the worker's
drain grace, then the actor stops. Either way `__ftrl_shutdown__()` runs last.
Before it serves, both signals end the process at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ftrl.util.imports import import_class
from ftrl.util.runtime import die_with_parent, run_async, setup_logging
from ftrl.worker.pipe import read_frame, write_frame

log = logging.getLogger("ftrl.actor")


def set_title(title: str) -> None:
    """This process's title in ps/top (no-op without setproctitle)."""
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except ImportError:  # pragma: no cover
        pass


def main(argv: list[str] | None = None) -> int:
    """A cold spare: parse the control fds, import, then serve (see the module doc)."""
    ap = argparse.ArgumentParser(prog="ftrl-actor-host")
    ap.add_argument("--ctl-in", type=int, required=True)
    ap.add_argument("--ctl-out", type=int, required=True)
    ap.add_argument("--preload", default="")
    args = ap.parse_args(argv)
    prepare_spare()
    preload_modules(args.preload)
    return serve_spare(args.ctl_in, args.ctl_out)


def prepare_spare() -> None:
    """What a spare sets before it serves: die with the worker, stop at once on SIGINT
    until an actor serves, and the process title."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # until it serves: a stop ends it at once
    die_with_parent()
    set_title("ftrl-actor-spare")


def preload_modules(preload: str) -> None:
    """Import what every spare imports before it says ready: the comma-separated
    `preload` modules (a failure is only printed), grpc and the actor server."""
    for module in filter(None, preload.split(",")):
        try:
            importlib.import_module(module)
        except Exception as e:  # a preload is only an optimization
            print(f"ftrl spare: preload of {module} failed: {e}", file=sys.stderr)
    import grpc  # noqa: F401  (the expensive part of every actor)

    from ftrl.worker import actor_server  # noqa: F401


def serve_spare(ctl_in: int, ctl_out: int) -> int:
    """Everything a spare does after its imports: say ready, wait for the assignment
    and run the actor. Returns 0 when the worker closes the pipe unassigned; once an
    actor ran, the process exits here (`os._exit`)."""
    write_frame(ctl_out, {"kind": "ready"})
    try:
        msg = read_frame(ctl_in)
    except EOFError:
        return 0
    if msg.get("log_path"):
        from ftrl.worker import logs

        path = Path(msg["log_path"])
        logs.redirect_output(path)
        logs.rotate_own_output(path, int(msg.get("log_max_bytes") or logs.DEFAULT_MAX_BYTES),
                               int(msg.get("log_backups", logs.DEFAULT_BACKUPS)), threading.Event())
        print(f"---- actor={msg.get('name', '')} incarnation={msg.get('incarnation', 0)} "
              f"node={msg.get('node_id', '')} pid={os.getpid()} started "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
    for key, value in (msg.get("env") or {}).items():
        os.environ[key] = value
    setup_logging(msg.get("log_level", "INFO"), "ftrl-actor")
    code = run_async(_serve(msg, ctl_in, ctl_out))
    # Exit now: a call still running in a user thread (a driver's training loop after its
    # drain) must not hold the process; interpreter exit would join every call thread.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


async def _serve(msg: dict[str, Any], ctl_in: int, ctl_out: int) -> int:
    from ftrl.client.context import RuntimeContext, set_runtime_context
    from ftrl.wire import codec
    from ftrl.wire import ftrl_pb2 as pb
    from ftrl.wire.limits import MAX_ACTOR_MESSAGE
    from ftrl.wire.security import Security, bind
    from ftrl.worker.actor_server import ActorServicer, new_actor_server, remote_error

    spec = pb.ActorSpec.FromString(msg["spec"])
    incarnation = int(msg["incarnation"])
    set_title(f"ftrl-actor {spec.name}")
    security = Security(**msg.get("security", {}))
    set_runtime_context(RuntimeContext(
        name=spec.name, incarnation=incarnation, node_id=msg.get("node_id", ""),
        coordinator=msg.get("coordinator", ""), restarts=int(msg.get("restarts", 0)),
        host=msg.get("bind_host") or "127.0.0.1", security=security,
    ))
    started = time.monotonic()
    try:
        cls = import_class(spec.class_path)
        kwargs = codec.decode(spec.kwargs) if spec.kwargs else {}
        obj = cls(**kwargs)
    except BaseException as e:  # report any construct failure, then exit
        err = remote_error(e)
        log.error("actor %s failed to start:\n%s", spec.name, err.traceback)
        write_frame(ctl_out, {"kind": "start_failed", "error_type": err.type, "message": err.message,
                              "traceback": err.traceback, "name": spec.name, "incarnation": incarnation})
        return 3
    fence = None
    if msg.get("coordinator"):
        from ftrl.client.aio import AsyncClient
        from ftrl.worker.fence import CallerFence

        coordinator = AsyncClient(msg["coordinator"], security=security, timeout=2.0)

        async def lookup(name: str) -> pb.ActorInfo:
            return await coordinator._rpc("GetActor", pb.GetActorRequest(name=name))

        fence = CallerFence(lookup)
    servicer = ActorServicer(obj, spec.name, incarnation, spec.max_concurrency or 1, fence)
    server = new_actor_server(servicer, security, MAX_ACTOR_MESSAGE)
    port = bind(server, f"{msg['bind_host']}:0", security)
    await server.start()
    # the handlers before "started": once the worker counts the actor alive, a SIGTERM
    # (a pre-emption notice to the whole node) must drain it, not kill it
    stop, drain = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGTERM, drain.set)
    write_frame(ctl_out, {"kind": "started", "port": port, "pid": os.getpid(), "name": spec.name,
                          "incarnation": incarnation})
    log.info("actor %s incarnation %d serving on port %d (started in %.3fs)",
             spec.name, incarnation, port, time.monotonic() - started)

    def _ctl_readable() -> None:
        try:
            data = os.read(ctl_in, 4096)
        except OSError:
            data = b""
        if not data:  # the worker is gone
            loop.remove_reader(ctl_in)
            stop.set()

    loop.add_reader(ctl_in, _ctl_readable)
    await _first_of(stop, drain)
    if drain.is_set() and not stop.is_set():
        grace = float(msg.get("drain_grace_s", 30.0))
        log.info("actor %s incarnation %d draining (at most %gs)", spec.name, incarnation, grace)
        draining = asyncio.ensure_future(servicer.drain(grace))
        await _first_of(stop, draining)
        if draining.done():
            log.info("actor %s incarnation %d: %s; stopping", spec.name, incarnation, draining.result())
        else:
            draining.cancel()
            log.warning("actor %s incarnation %d: asked to stop now while draining", spec.name,
                        incarnation)
    shutdown = getattr(obj, "__ftrl_shutdown__", None)
    if callable(shutdown):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.to_thread(shutdown), 5.0)
    await server.stop(0.5)
    servicer.executor.shutdown(wait=False, cancel_futures=True)
    return 0


async def _first_of(*waits: asyncio.Event | asyncio.Future) -> None:
    """Return once one of the events is set or one of the futures is done."""
    waiters = [asyncio.ensure_future(w.wait()) if isinstance(w, asyncio.Event) else w for w in waits]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w, original in zip(waiters, waits, strict=True):
            if w is not original:
                w.cancel()


if __name__ == "__main__":
    sys.exit(main())
