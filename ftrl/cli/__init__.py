"""The `ftrl` program: one entry, one small function per subcommand."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from typing import Any

from ftrl import __version__
from ftrl.wire.errors import ConfigError, FailedPreconditionError, FtrlError

log = logging.getLogger("ftrl.cli")


def _add_security(p: argparse.ArgumentParser, server: bool = False) -> None:
    g = p.add_argument_group("security")
    g.add_argument("--token-file", help="file holding the cluster token (or set FTRL_TOKEN)")
    g.add_argument("--tls-cert", help="PEM certificate of this process (TLS)")
    g.add_argument("--tls-key", help="PEM private key of this process (TLS)")
    g.add_argument("--tls-ca", help="PEM CA of peers (servers: require client certs = mTLS)")
    g.add_argument("--tls-server-name", help="name to verify in the server certificate")
    if server:
        g.add_argument("--insecure", action="store_true",
                       help="allow listening on a non-loopback address without a token")
        g.add_argument("--tls-no-client-auth", action="store_true",
                       help="TLS without client certificates: --tls-ca only verifies servers")


def _add_verbose(p: argparse.ArgumentParser) -> None:
    """`-v` after the subcommand too (`ftrl worker -v`), same as `ftrl -v worker`."""
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log at DEBUG")


def _security(args: argparse.Namespace):
    from ftrl.wire.security import security_from_args

    return security_from_args(args)


def positive(kind):
    """An argparse type: a `kind` number > 0."""

    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"  # argparse: "invalid positive int value: 'x'"
    return parse


def non_negative_int(text: str) -> int:
    """An argparse type: an int >= 0 (argparse: "invalid non_negative_int value: 'x'")."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _resources(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"resource {item!r} is not KEY=AMOUNT")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"resource amount {value!r} is not a number") from None
    return out


# ---------------------------------------------------------------- subcommands


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
    run_async(serve(opts, _security(args)))
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
    run_async(serve(opts, _security(args)))
    return 0


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _client(args: argparse.Namespace):
    from ftrl.client.client import Client

    return Client(args.coordinator, security=_security(args))


def _ago(since: float) -> str:
    return f"{max(0.0, time.time() - since):.0f}s" if since else "-"


def _job_rows(jobs: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for j in jobs:
        ret = j["metrics"].get("episode_return_mean")
        rows.append([j["job_id"], j["stage"], _ago(j["stage_since"]), j["iteration"], f"{j['env_steps_sampled']:,}",
                     "-" if ret is None else f"{ret:.1f}", j["num_env_runners"], j["num_learners"],
                     (j["reason"].splitlines() or [""])[0][:60]])
    return rows


_JOB_HEADER = ["JOB", "STAGE", "FOR", "ITER", "ENV STEPS", "RETURN", "RUNNERS", "LEARNERS", "REASON"]


def _cluster_jobs(client) -> list[dict[str, Any]]:
    """The coordinator's jobs ([] from a coordinator without the jobs API)."""
    from ftrl.wire.errors import MethodNotFoundError

    try:
        return client.jobs()
    except MethodNotFoundError:
        return []


def cmd_status(args: argparse.Namespace) -> int:
    if args.job:
        return _job_status(args)
    with _client(args) as client:
        info = client.cluster_info()
        nodes = client.nodes()
        actors = client.actors(args.prefix or "")
        meshes = [m for m in client.meshes() if m["group"].startswith(args.prefix or "")]
        jobs = _cluster_jobs(client)
    if args.json:
        print(json.dumps({"cluster": info, "nodes": nodes, "actors": actors, "learner_groups": meshes,
                          "jobs": jobs}, indent=2, default=str))
        return 0
    alive = sum(1 for n in nodes if n["state"] == "ALIVE")
    print(f"coordinator {client.address} ({info['coordinator_id']}, ftrl {info['version']}, "
          f"up {info['uptime_s']:.0f}s): {alive}/{len(nodes)} nodes alive, {len(actors)} actors")
    print()
    print(_table(
        [[n["node_id"], n["state"], n["address"], f"{n['available'].get('cpu', 0):g}/{n['resources'].get('cpu', 0):g}",
          len(n["actors"]), n["failures"], f"{n['last_heartbeat_age_s']:.1f}s"] for n in nodes],
        ["NODE", "STATE", "ADDRESS", "CPU FREE", "ACTORS", "FAILURES", "HEARTBEAT"],
    ) if nodes else "no nodes")
    print()
    print(_table(
        [[a["name"], a["state"], a["node_id"] or "-", a["pid"] or "-", a["incarnation"], a["restarts"],
          a["class_path"], (a["death_reason"].splitlines() or [""])[0][:60]] for a in actors],
        ["ACTOR", "STATE", "NODE", "PID", "INC", "RESTARTS", "CLASS", "DEATH REASON"],
    ) if actors else "no actors")
    if meshes:
        print()
        print(_table(
            [[m["group"], m["epoch"], len(m["members"]),
              " ".join(f"{x['rank']}:{x['name'].rsplit('/', 1)[-1]}@{x['incarnation']}" for x in m["members"]) or "-",
              len(m["waiting"]), (m["reason"] or "")[:60]] for m in meshes],
            ["LEARNER GROUP", "EPOCH", "MEMBERS", "RANKS", "WAITING", "LAST CHANGE"],
        ))
    print()
    print(_table(_job_rows(jobs), _JOB_HEADER) if jobs else "no jobs")
    return 0


def _job_status(args: argparse.Namespace) -> int:
    """`ftrl status JOB`: one job's record."""
    with _client(args) as client:
        job = client.job_status(args.job)
    if args.json:
        print(json.dumps(job, indent=2, default=str))
        return 0
    from ftrl.client.jobs import FINAL_STAGES

    m = job["metrics"]
    ret = m.get("episode_return_mean")
    stopping = job["stop_requested"] and job["stage"] not in FINAL_STAGES
    lines = [
        ("job", job["job_id"]),
        ("stage", f"{job['stage']} for {_ago(job['stage_since'])}" + (" (stop requested)" if stopping else "")),
        ("reason", job["reason"] or "-"),
        ("iteration", job["iteration"]),
        ("env steps", f"{job['env_steps_sampled']:,}"),
        ("return", "-" if ret is None else f"{ret:.1f}"),
        ("env runners", f"{m.get('num_healthy_env_runners', '-')} healthy, {job['num_env_runners']} wanted"),
        ("learners", job["num_learners"]),
        ("driver", f"incarnation {job['driver_incarnation']}" if job["driver_incarnation"] else "-"),
        ("last checkpoint", job["last_checkpoint"] or "-"),
        ("output", job["output_dir"] or "-"),
        ("actors", " ".join(job["actors"]) or "-"),
    ]
    width = max(len(k) for k, _ in lines)
    print("\n".join(f"{k.ljust(width)}  {v}" for k, v in lines))
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from ftrl.config.jobs import build_job

    job = build_job(args)  # ConfigError (exit 2) before any call
    with _client(args) as client:
        job_id = client.submit(job, job_id=args.job_name, output_dir=args.output, resume=args.resume)
    print(job_id)
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    if args.env_runners is None and args.learners is None:
        print("ftrl scale: error: give at least one of --env-runners, --learners", file=sys.stderr)
        return 2
    with _client(args) as client:
        job = client.scale(args.job, env_runners=args.env_runners, learners=args.learners)
    print(f"job {job['job_id']} ({job['stage']}): {job['num_env_runners']} env runners, "
          f"{job['num_learners']} learners wanted")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.stop(args.job, wait=args.wait, timeout=args.timeout)
    if args.json:
        print(json.dumps(job, indent=2, default=str))
    else:
        from ftrl.client.jobs import FINAL_STAGES

        note = job["reason"] if job["stage"] in FINAL_STAGES else "stopping after its current iteration"
        print(f"job {job['job_id']}: {job['stage']}" + (f" ({note})" if note else ""))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    """`ftrl logs ACTOR|JOB [-f]`: print (and follow) actor logs from their workers."""
    with _client(args) as client:
        lines = client.logs(args.target, tail=args.lines, follow=args.follow)
        prefix = None
        for name, line in lines:
            if prefix is None:
                prefix = name != args.target  # a job: say whose line it is
            print(f"[{name}] {line}" if prefix else line, flush=args.follow)
    return 0


def cmd_node_readmit(args: argparse.Namespace) -> int:
    with _client(args) as client:
        node = client.readmit_node(args.node)
    print(f"node {node['node_id']}: {node['state']}")
    return 0


def cmd_systemd_units(args: argparse.Namespace) -> int:
    from ftrl.launch.systemd import describe, install_units, options_from_args

    result = install_units(options_from_args(args), args.output, args.node_id, args.units_only)
    print(describe(result, args.user))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ftrl.cli.train import run_train

    return run_train(args)


def _count(text: str) -> int:
    from ftrl.client.jobs import MAX_SCALE

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 0 <= value <= MAX_SCALE:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_SCALE}, got {text}")
    return value


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ftrl", description="fault-tolerant distributed RL runtime")
    ap.add_argument("--version", action="version", version=f"ftrl {__version__}")
    ap.add_argument("--log-level", default=os.environ.get("FTRL_LOG_LEVEL", "INFO"),
                    choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    ap.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG (as --log-level DEBUG)")
    sub = ap.add_subparsers(dest="command", required=True)
    coordinator_default = os.environ.get("FTRL_COORDINATOR", "127.0.0.1:6380")

    p = sub.add_parser("coordinator", help="run the control plane")
    _add_verbose(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=6380, help="port (0 = any free port)")
    p.add_argument("--state-dir", help="directory for durable state (SQLite, WAL): nodes, actors, "
                   "jobs survive a coordinator crash; default job outputs go to DIR/jobs/JOB. "
                   "Without it, state lives in memory and a restart rebuilds from worker reports")
    p.add_argument("--recover", action="store_true",
                   help="the state database is unreadable: move it aside, start empty and rebuild "
                   "from what workers report (running jobs come back from their drivers)")
    p.add_argument("--node-failure-window", type=positive(float), default=3600.0, metavar="S",
                   help="--max-node-failures counts actor failures of the last S seconds")
    p.add_argument("--job-unhealthy-timeout", type=positive(float), default=300.0, metavar="S",
                   help="a running job with no live env runner for S seconds FAILS")
    p.add_argument("--heartbeat-interval", type=positive(float), default=1.0, metavar="S")
    p.add_argument("--heartbeat-timeout", type=positive(float), default=5.0, metavar="S")
    p.add_argument("--max-node-failures", type=int, default=100,
                   help="actor failures after which a node is excluded (-1 = never)")
    p.add_argument("--http-port", type=int, metavar="P",
                   help="serve HTTP on this port (0 = any free port): a live status page at /, "
                   "/api/status (JSON), /metrics (Prometheus), /healthz; /api and / need the token")
    p.add_argument("--http-host", metavar="H", help="address the HTTP server listens on (default: --host)")
    p.add_argument("--http-port-file", metavar="F", help="write the bound HTTP port to this file")
    p.add_argument("--http-public-metrics", action="store_true",
                   help="serve /healthz and /metrics without the token on a non-loopback address")
    p.add_argument("--port-file", help="write the bound port to this file once listening")
    p.add_argument("--create-rate", type=positive(float), default=200.0, metavar="N",
                   help="CreateActor calls per second allowed per peer host (default 200)")
    p.add_argument("--create-burst", type=positive(float), default=2000.0, metavar="N",
                   help="CreateActor calls a peer host may make at once (default 2000)")
    _add_security(p, server=True)
    p.set_defaults(fn=cmd_coordinator)

    p = sub.add_parser("worker", help="run a node agent that hosts actors")
    _add_verbose(p)
    p.add_argument("--coordinator", default=coordinator_default, metavar="HOST:PORT")
    p.add_argument("--slots", type=positive(int), help="CPU slots offered (default: CPU count)")
    p.add_argument("--gpus", type=non_negative_int, default=0,
                   help="GPUs offered; actors get their own CUDA_VISIBLE_DEVICES (taken from "
                   "this worker's CUDA_VISIBLE_DEVICES when it has one)")
    p.add_argument("--resources", type=_resources, help="custom resources, e.g. sim=4,tpu=1")
    p.add_argument("--node-id", help="unique node id (default HOSTNAME-PID)")
    p.add_argument("--address", help="address this node's actors listen on and advertise")
    p.add_argument("--actor-hang-timeout", type=positive(float), default=10.0, metavar="S",
                   help="kill and restart an actor that does not answer pings this long")
    p.add_argument("--actor-start-timeout", type=positive(float), default=300.0, metavar="S")
    p.add_argument("--spares", type=int, default=1, help="warm spare processes kept for fast restarts")
    p.add_argument("--preload", default="", help="modules spares import ahead, e.g. ftrl.rl.sampling.env_runner,gymnasium; "
                   "MODULES;first:MODULES2 also starts one spare with MODULES2 for the first actor "
                   "(e.g. a job's driver that needs torch)")
    p.add_argument("--log-dir", help="where actor logs go (one file per actor; default "
                   "/tmp/ftrl-UID/NODE/logs)")
    p.add_argument("--log-max-bytes", type=positive(int), default=50 << 20, metavar="B",
                   help="rotate an actor's log file past this size (default 50 MiB)")
    p.add_argument("--log-backups", type=int, default=3, metavar="N",
                   help="rotated files kept per actor (default 3)")
    p.add_argument("--drain-timeout", type=positive(float), default=60.0, metavar="S",
                   help="on SIGTERM, move actors away for at most this long, then exit (default 60)")
    p.add_argument("--connect-timeout", type=positive(float), default=120.0, metavar="S",
                   help="exit (status 1) when the coordinator cannot be joined for S seconds at "
                   "start (default 120); once joined, a lost coordinator is retried for ever")
    _add_security(p, server=True)
    p.set_defaults(fn=cmd_worker)

    def client_command(name: str, help_text: str, fn, parent=sub) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text, description=help_text)
        _add_verbose(p)
        p.add_argument("--coordinator", default=coordinator_default, metavar="HOST:PORT")
        _add_security(p)
        p.set_defaults(fn=fn)
        return p

    p = client_command("status", "show nodes, actors and jobs, or one job", cmd_status)
    p.add_argument("job", nargs="?", metavar="JOB", help="show this job only")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--prefix", help="only actors whose name starts with this")

    p = sub.add_parser("train", help="train an RL algorithm (embedded local cluster by default)")
    _add_verbose(p)
    try:
        from ftrl.cli.train import add_train_arguments
    except ImportError:  # pragma: no cover
        add_train_arguments = None
    if add_train_arguments is not None:
        add_train_arguments(p)
    _add_security(p)
    p.set_defaults(fn=cmd_train)

    p = client_command("submit", "submit a job file to a running cluster; prints the job id", cmd_submit)
    from ftrl.cli.train import add_job_arguments, job_id_arg

    add_job_arguments(p, config_positional=True)
    p.add_argument("--output", metavar="DIR", help="output directory, as the coordinator's host "
                   "sees it (default: in the coordinator's state dir, jobs/JOB)")
    p.add_argument("--job-name", type=job_id_arg, metavar="N", help="the job's id (default: one is made)")

    p = client_command("scale", "ask a job for a number of env runners and/or learners", cmd_scale)
    p.add_argument("job", metavar="JOB")
    p.add_argument("--env-runners", type=_count, metavar="N")
    p.add_argument("--learners", type=_count, metavar="M")

    p = client_command("stop", "stop a job after its current iteration (final checkpoint)", cmd_stop)
    p.add_argument("job", metavar="JOB")
    p.add_argument("--wait", action="store_true", help="return once the job has ended")
    p.add_argument("--timeout", type=positive(float), default=600.0, metavar="S",
                   help="longest --wait waits (default 600)")
    p.add_argument("--json", action="store_true", help="print the job's record as JSON")

    p = client_command("logs", "print an actor's log, or the logs of a job's actors, from the "
                       "nodes that hold them", cmd_logs)
    p.add_argument("target", metavar="ACTOR|JOB")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument("-n", "--lines", type=int, default=100, metavar="N",
                   help="start with the last N lines of each log (default 100; -1: all)")

    p = sub.add_parser("node", help="manage nodes")
    node_sub = p.add_subparsers(dest="node_command", metavar="readmit", required=True)
    p = client_command("readmit", "take an EXCLUDED node back", cmd_node_readmit, parent=node_sub)
    p.add_argument("node", metavar="NODE")

    from ftrl.launch.systemd import add_arguments as add_systemd_arguments

    p = sub.add_parser("systemd-units", help="write systemd units for a coordinator and workers",
                       description="write ftrl-coordinator.service and ftrl-worker@.service "
                       "(instance = node id), an example env file and a token file if missing")
    add_systemd_arguments(p)
    p.set_defaults(fn=cmd_systemd_units)
    return ap


def main(argv: list[str] | None = None) -> int:
    from ftrl.util.runtime import setup_logging

    args = build_parser().parse_args(argv)
    if args.verbose:
        args.log_level = "DEBUG"
    setup_logging(args.log_level, f"ftrl-{args.command}")
    if os.environ.get("FTRL_DIE_WITH_PARENT") == "1" and args.command in ("coordinator", "worker"):
        from ftrl.util.runtime import die_with_parent

        # the owner of an embedded cluster is gone: stop at once (a worker drains on SIGTERM)
        die_with_parent(signal.SIGINT if args.command == "worker" else signal.SIGTERM)
    try:
        return args.fn(args) or 0
    except KeyboardInterrupt:
        return 130
    except FtrlError as e:
        print(f"ftrl {args.command}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError | FailedPreconditionError) else 1
    finally:
        logging.shutdown()
        time.sleep(0)


if __name__ == "__main__":
    sys.exit(main())
