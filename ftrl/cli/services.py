"""`ftrl coordinator`, `ftrl worker`, `ftrl node readmit`, `ftrl systemd-units`: running
and managing the processes of a cluster."""

from __future__ import annotations

import argparse

from ftrl.cli.args import security
from ftrl.cli.jobs import client_of
from ftrl.wire.errors import ConfigError


def cmd_coordinator(args: argparse.Namespace) -> int:
    from ftrl.coordinator.main import CoordinatorOptions, serve
    from ftrl.util.runtime import run_async

    opts = CoordinatorOptions(
        host=args.host, port=args.port, state_dir=args.state_dir,
        heartbeat_interval_s=args.heartbeat_interval, heartbeat_timeout_s=args.heartbeat_timeout,
        max_node_failures=args.max_node_failures, port_file=args.port_file,
        create_rate=args.create_rate, create_burst=args.create_burst, recover=args.recover,
        node_failure_window_s=args.node_failure_window,
        job_unhealthy_timeout_s=args.job_unhealthy_timeout,
        http_port=args.http_port, http_host=args.http_host, http_port_file=args.http_port_file,
        http_public_metrics=args.http_public_metrics,
    )
    if not 0 < opts.heartbeat_interval_s < opts.heartbeat_timeout_s:
        raise ConfigError("--heartbeat-interval must be smaller than --heartbeat-timeout")
    run_async(serve(opts, security(args)))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from ftrl.util.runtime import run_async
    from ftrl.worker.agent import WorkerOptions
    from ftrl.worker.main import serve

    opts = WorkerOptions(
        coordinator=args.coordinator, node_id=args.node_id, slots=args.slots or 0,
        gpus=args.gpus, resources=args.resources or {}, address=args.address,
        actor_hang_timeout_s=args.actor_hang_timeout, actor_start_timeout_s=args.actor_start_timeout,
        spares=args.spares, preload=args.preload, log_dir=args.log_dir, log_level=args.log_level,
        drain_timeout_s=args.drain_timeout, connect_timeout_s=args.connect_timeout,
        log_max_bytes=args.log_max_bytes, log_backups=args.log_backups,
    )
    run_async(serve(opts, security(args)))
    return 0


def cmd_node_readmit(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        node = client.readmit_node(args.node)
    print(f"node {node['node_id']}: {node['state']}")
    return 0


def cmd_systemd_units(args: argparse.Namespace) -> int:
    from ftrl.launch.systemd import describe, install_units, options_from_args

    result = install_units(options_from_args(args), args.output, args.node_id, args.units_only)
    print(describe(result, args.user))
    return 0
