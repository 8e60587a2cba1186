"""`ftrl coordinator`: run the control plane until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import gc
import logging
from dataclasses import dataclass
from pathlib import Path

from ftrl.coordinator.controller import Controller, ControllerConfig
from ftrl.coordinator.http import HttpServer
from ftrl.coordinator.server import CoordinatorServer
from ftrl.coordinator.store import open_store
from ftrl.util.awake_clock import AwakeClock, pause_gap
from ftrl.util.files import atomic_write_bytes
from ftrl.util.runtime import stop_on_signals
from ftrl.wire.security import Security, check_bind, is_loopback

log = logging.getLogger(__name__)


def tune_gc() -> None:
    """Fewer, cheaper garbage collections: with thousands of node streams the default
    thresholds ran full collections that stalled heartbeat handling for 100+ ms."""
    gc.collect()
    gc.freeze()  # what exists at start-up (modules, the server) is never scanned again
    gc.set_threshold(50_000, 20, 100)


@dataclass
class CoordinatorOptions:
    host: str = "127.0.0.1"
    port: int = 6380
    state_dir: str | None = None
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    max_node_failures: int = 100
    port_file: str | None = None
    create_rate: float = 200.0  # CreateActor calls per second per peer host
    create_burst: float = 2000.0
    recover: bool = False  # rebuild from worker reports after moving an unreadable database aside
    node_failure_window_s: float = 3600.0
    job_unhealthy_timeout_s: float = 300.0
    http_port: int | None = None  # None: no HTTP server; 0: any free port
    http_host: str | None = None  # None: the same as host
    http_port_file: str | None = None
    http_public_metrics: bool = False  # /healthz and /metrics without the token off loopback


def jobs_dir(state_dir: str | None) -> Path:
    """Where jobs submitted without an output dir write: STATE_DIR/jobs (else ./ftrl_jobs)."""
    return Path(state_dir).absolute() / "jobs" if state_dir else Path("ftrl_jobs").absolute()


async def serve(opts: CoordinatorOptions, security: Security, stop: asyncio.Event | None = None) -> None:
    """Serve until `stop` is set (or a signal arrives)."""
    check_bind(opts.host, security, "the coordinator")
    tune_gc()
    config = ControllerConfig(
        heartbeat_interval_s=opts.heartbeat_interval_s,
        heartbeat_timeout_s=opts.heartbeat_timeout_s,
        max_node_failures=opts.max_node_failures,
        node_failure_window_s=opts.node_failure_window_s,
        job_unhealthy_timeout_s=opts.job_unhealthy_timeout_s,
    )
    store = open_store(opts.state_dir, recover=opts.recover)  # StateStoreError: refuse to start
    try:
        controller = Controller(config, store=store)
        # From here on, silence of nodes counts only while the coordinator runs: a pause
        # of its process or VM does not make every node look lost at once. (Its restore
        # above ran on time.monotonic, the same time base: nothing is left out yet. The
        # tick loop calls the clock every 0.05 s.)
        controller.clock = AwakeClock(pause_gap(config.heartbeat_timeout_s), what="the coordinator")
        controller.jobs.jobs_dir = jobs_dir(opts.state_dir)
        await _serve(opts, security, controller, stop)
    finally:
        store.close()


async def _serve(opts: CoordinatorOptions, security: Security, controller: Controller,
                 stop: asyncio.Event | None) -> None:
    server = CoordinatorServer(controller, security, opts.host, opts.port,
                               create_rate=opts.create_rate, create_burst=opts.create_burst)
    port = await server.start()
    try:
        http = await _start_http(opts, server)
    except BaseException:
        await server.stop(grace=0)
        raise
    if stop is None:
        stop = asyncio.Event()
        stop_on_signals(stop)
    if server.local_token_file is not None:
        auth = f"token in {server.local_token_file} (this user's workers and clients find it)"
    elif server.security.token:
        auth = "token"
    else:
        auth = "none (--insecure)"
        log.warning("INSECURE: the coordinator accepts calls without a token from anyone who "
                    "can reach %s:%d", opts.host, port)
    log.info(
        "ftrl coordinator %s listening on %s:%d (auth: %s, tls: %s, heartbeat %.1fs/%.1fs, state: %s)",
        controller.coordinator_id, opts.host, port, auth, "on" if security.tls else "off",
        opts.heartbeat_interval_s, opts.heartbeat_timeout_s,
        f"{opts.state_dir} ({'restored' if controller.restored else 'new'})" if opts.state_dir
        else "in memory",
    )
    if opts.port_file:
        atomic_write_bytes(Path(opts.port_file), f"{port}\n".encode())
    try:
        await stop.wait()
    finally:
        log.info("coordinator stopping")
        if http is not None:
            await http.stop()
        await server.stop(grace=1.0)


async def _start_http(opts: CoordinatorOptions, server: CoordinatorServer) -> HttpServer | None:
    """The HTTP server (status page, /api/status, /metrics) if --http-port was given."""
    if opts.http_port is None:
        return None
    host = opts.http_host or opts.host
    if not server.security.token and not is_loopback(host):
        if not server.security.insecure:
            check_bind(host, server.security, "the coordinator's HTTP server")  # refuses, saying why
        log.warning("INSECURE: the HTTP server on %s has no token: anyone who can reach it reads "
                    "the cluster's state", host)
    http = HttpServer(server.controller, server.security.token, host, opts.http_port,
                      public_metrics=opts.http_public_metrics, metrics=server.servicer.metrics)
    port = await http.start()  # ConfigError naming --http-port if the port is taken
    if server.security.token:
        where = f"the token in {server.local_token_file}" if server.local_token_file else "the cluster token"
        auth = (f"log in with {where}, or open {http.url}#token=TOKEN; API clients send "
                "Authorization: Bearer TOKEN")
        metrics = "open" if http.auth.open_metrics else "need the token"
        auth += f"; /healthz and /metrics {metrics}"
    else:
        auth = "no token: open to anyone who can reach it"
    log.info("status page at %s (%s)", http.url, auth)
    if server.security.token and not is_loopback(host):
        log.warning("the HTTP server on %s is plain HTTP: the token and the cluster's state cross the "
                    "network unencrypted; keep it on loopback or put a TLS proxy in front", host)
    if opts.http_port_file:
        atomic_write_bytes(Path(opts.http_port_file), f"{port}\n".encode())
    return http
