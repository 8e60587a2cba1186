"""The `ftrl` program: the parser and `main`. Each subcommand is one small function in
ftrl.cli.services (coordinator, worker, node, systemd-units), ftrl.cli.jobs (status,
submit, scale, stop, logs, train), ftrl.cli.train (what `ftrl train` runs),
ftrl.cli.tune or ftrl.cli.watch (evaluate, plot); the argparse types they share are in
ftrl.cli.args."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

from ftrl import __version__
from ftrl.cli.args import add_security, add_verbose, count, non_negative_int, positive, resources
from ftrl.cli.jobs import cmd_logs, cmd_scale, cmd_status, cmd_stop, cmd_submit, cmd_train
from ftrl.cli.services import cmd_coordinator, cmd_node_readmit, cmd_systemd_units, cmd_worker
from ftrl.wire.errors import ConfigError, FailedPreconditionError, FtrlError

log = logging.getLogger("ftrl.cli")



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
    add_verbose(p)
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
    add_security(p, server=True)
    p.set_defaults(fn=cmd_coordinator)

    p = sub.add_parser("worker", help="run a node agent that hosts actors")
    add_verbose(p)
    p.add_argument("--coordinator", default=coordinator_default, metavar="HOST:PORT")
    p.add_argument("--slots", type=positive(int), help="CPU slots offered (default: CPU count)")
    p.add_argument("--gpus", type=non_negative_int, default=0,
                   help="GPUs offered; actors get their own CUDA_VISIBLE_DEVICES (taken from "
                   "this worker's CUDA_VISIBLE_DEVICES when it has one)")
    p.add_argument("--resources", type=resources, help="custom resources, e.g. sim=4,tpu=1")
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
    add_security(p, server=True)
    p.set_defaults(fn=cmd_worker)

    def client_command(name: str, help_text: str, fn, parent=sub) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text, description=help_text)
        add_verbose(p)
        p.add_argument("--coordinator", default=coordinator_default, metavar="HOST:PORT")
        add_security(p)
        p.set_defaults(fn=fn)
        return p

    p = client_command("status", "show nodes, actors and jobs, or one job", cmd_status)
    p.add_argument("job", nargs="?", metavar="JOB", help="show this job only")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--prefix", help="only actors whose name starts with this")

    p = sub.add_parser("train", help="train an RL algorithm (embedded local cluster by default)")
    add_verbose(p)
    try:
        from ftrl.cli.train import add_train_arguments
    except ImportError:  # pragma: no cover
        add_train_arguments = None
    if add_train_arguments is not None:
        add_train_arguments(p)
    add_security(p)
    p.set_defaults(fn=cmd_train)

    from ftrl.cli.watch import add_evaluate_arguments, add_plot_arguments, cmd_evaluate, cmd_plot

    p = sub.add_parser("evaluate", help="run episodes with a trained policy (and record videos)",
                       description="ftrl evaluate CHECKPOINT_OR_RUN_DIR [--episodes N] [--video DIR] [--seed S]: "
                       "the newest state of a run (or a checkpoint), on this machine, no cluster")
    add_verbose(p)
    add_evaluate_arguments(p)
    p.set_defaults(fn=cmd_evaluate)

    p = sub.add_parser("plot", help="a PNG of a run's curves, restarts and resumes marked",
                       description="ftrl plot RUN_DIR [--out FILE]")
    add_verbose(p)
    add_plot_arguments(p)
    p.set_defaults(fn=cmd_plot)

    p = sub.add_parser("tune", help="run a tuning experiment (PBT), or show / plot one",
                       description="ftrl tune EXPERIMENT.toml [--coordinator A] [--resume] | "
                       "ftrl tune status DIR | ftrl tune plot DIR")
    add_verbose(p)
    from ftrl.cli.tune import add_tune_arguments, cmd_tune

    add_tune_arguments(p)
    add_security(p)
    p.set_defaults(fn=cmd_tune)

    p = client_command("submit", "submit a job file to a running cluster; prints the job id", cmd_submit)
    from ftrl.cli.train import add_job_arguments, job_id_arg

    add_job_arguments(p, config_positional=True)
    p.add_argument("--output", metavar="DIR", help="output directory, as the coordinator's host "
                   "sees it (default: in the coordinator's state dir, jobs/JOB)")
    p.add_argument("--job-name", type=job_id_arg, metavar="N", help="the job's id (default: one is made)")

    p = client_command("scale", "ask a job for a number of env runners and/or learners", cmd_scale)
    p.add_argument("job", metavar="JOB")
    p.add_argument("--env-runners", type=count, metavar="N")
    p.add_argument("--learners", type=count, metavar="M")

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


#: the commands that import user code by import path (envs, models, callbacks) here or
#: in the processes they start
USER_CODE_COMMANDS = ("train", "evaluate", "tune", "worker")


def put_cwd_on_import_path() -> None:
    """User code named by import path (`examples.boxworld.env:BoxWorld`) is found from the
    directory the command runs in, as `python -m` finds it, in this process and in the
    processes it starts (an embedded cluster's workers and actors: PYTHONPATH)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *paths])


def main(argv: list[str] | None = None) -> int:
    from ftrl.util.runtime import setup_logging

    args = build_parser().parse_args(argv)
    if args.command in USER_CODE_COMMANDS:
        put_cwd_on_import_path()
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
