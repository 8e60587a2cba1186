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
from ftrl.wire.errors import ConfigError, FtrlError

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


def _security(args: argparse.Namespace):
    from ftrl.wire.security import Security

    env = os.environ.get
    return Security.from_options(
        token_file=args.token_file,
        tls_cert=args.tls_cert or env("FTRL_TLS_CERT"),
        tls_key=args.tls_key or env("FTRL_TLS_KEY"),
        tls_ca=args.tls_ca or env("FTRL_TLS_CA"),
        tls_server_name=args.tls_server_name or env("FTRL_TLS_SERVER_NAME"),
        insecure=getattr(args, "insecure", False) or env("FTRL_INSECURE") == "1",
        tls_client_auth=not (getattr(args, "tls_no_client_auth", False)
                             or env("FTRL_TLS_NO_CLIENT_AUTH") == "1"),
    )


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


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
        create_rate=args.create_rate, create_burst=args.create_burst,
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
    )
    run_async(serve(opts, _security(args)))
    return 0


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def cmd_status(args: argparse.Namespace) -> int:
    from ftrl.client.client import Client

    with Client(args.coordinator, security=_security(args)) as client:
        info = client.cluster_info()
        nodes = client.nodes()
        actors = client.actors(args.prefix or "")
        meshes = [m for m in client.meshes() if m["group"].startswith(args.prefix or "")]
    if args.json:
        print(json.dumps({"cluster": info, "nodes": nodes, "actors": actors, "learner_groups": meshes}, indent=2))
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
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ftrl.rl.train_cli import run_train

    return run_train(args)


def cmd_not_yet(args: argparse.Namespace) -> int:
    print(f"ftrl {args.command}: jobs submitted to a running coordinator arrive with durable "
          "coordinator state; for now run `ftrl train --coordinator HOST:PORT`", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ftrl", description="fault-tolerant distributed RL runtime")
    ap.add_argument("--version", action="version", version=f"ftrl {__version__}")
    ap.add_argument("--log-level", default=os.environ.get("FTRL_LOG_LEVEL", "INFO"),
                    choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = ap.add_subparsers(dest="command", required=True)
    coordinator_default = os.environ.get("FTRL_COORDINATOR", "127.0.0.1:6380")

    p = sub.add_parser("coordinator", help="run the control plane")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=6380, help="port (0 = any free port)")
    p.add_argument("--state-dir", help="directory for coordinator state (reserved: durable "
                   "state arrives with jobs; today a restarted coordinator rebuilds its registry "
                   "from what the workers report)")
    p.add_argument("--heartbeat-interval", type=_positive(float), default=1.0, metavar="S")
    p.add_argument("--heartbeat-timeout", type=_positive(float), default=5.0, metavar="S")
    p.add_argument("--max-node-failures", type=int, default=100,
                   help="actor failures after which a node is excluded (-1 = never)")
    p.add_argument("--http-port", type=int, help="(reserved) HTTP status page and /metrics")
    p.add_argument("--port-file", help="write the bound port to this file once listening")
    p.add_argument("--create-rate", type=_positive(float), default=200.0, metavar="N",
                   help="CreateActor calls per second allowed per peer host (default 200)")
    p.add_argument("--create-burst", type=_positive(float), default=2000.0, metavar="N",
                   help="CreateActor calls a peer host may make at once (default 2000)")
    _add_security(p, server=True)
    p.set_defaults(fn=cmd_coordinator)

    p = sub.add_parser("worker", help="run a node agent that hosts actors")
    p.add_argument("--coordinator", default=coordinator_default, metavar="HOST:PORT")
    p.add_argument("--slots", type=_positive(int), help="CPU slots offered (default: CPU count)")
    p.add_argument("--gpus", type=int, default=0)
    p.add_argument("--resources", type=_resources, help="custom resources, e.g. sim=4,tpu=1")
    p.add_argument("--node-id", help="unique node id (default HOSTNAME-PID)")
    p.add_argument("--address", help="address this node's actors listen on and advertise")
    p.add_argument("--actor-hang-timeout", type=_positive(float), default=10.0, metavar="S",
                   help="kill and restart an actor that does not answer pings this long")
    p.add_argument("--actor-start-timeout", type=_positive(float), default=300.0, metavar="S")
    p.add_argument("--spares", type=int, default=1, help="warm spare processes kept for fast restarts")
    p.add_argument("--preload", default="", help="modules spares import ahead, e.g. torch,gymnasium")
    p.add_argument("--log-dir", help="where actor logs go")
    _add_security(p, server=True)
    p.set_defaults(fn=cmd_worker)

    p = sub.add_parser("status", help="show nodes and actors")
    p.add_argument("--coordinator", default=coordinator_default, metavar="HOST:PORT")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--prefix", help="only actors whose name starts with this")
    _add_security(p)
    p.set_defaults(fn=cmd_status)

    p = sub.add_parser("train", help="train an RL algorithm (embedded local cluster by default)")
    try:
        from ftrl.rl.train_cli import add_train_arguments
    except ImportError:  # pragma: no cover
        add_train_arguments = None
    if add_train_arguments is not None:
        add_train_arguments(p)
    _add_security(p)
    p.set_defaults(fn=cmd_train)

    for name, text in (("submit", "submit a job file"), ("scale", "resize a job"), ("stop", "stop a job")):
        p = sub.add_parser(name, help=f"{text} (arrives with durable jobs)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(fn=cmd_not_yet)
    return ap


def main(argv: list[str] | None = None) -> int:
    from ftrl.util.runtime import setup_logging

    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, f"ftrl-{args.command}")
    if os.environ.get("FTRL_DIE_WITH_PARENT") == "1" and args.command in ("coordinator", "worker"):
        from ftrl.util.runtime import die_with_parent

        die_with_parent(signal.SIGTERM)
    try:
        return args.fn(args) or 0
    except KeyboardInterrupt:
        return 130
    except FtrlError as e:
        print(f"ftrl {args.command}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1
    finally:
        logging.shutdown()
        time.sleep(0)


if __name__ == "__main__":
    sys.exit(main())
