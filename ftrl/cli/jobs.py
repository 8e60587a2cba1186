"""`ftrl status`, `submit`, `scale`, `stop`, `logs` and `train`: jobs and what a cluster
runs, as tables or JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ftrl.cli.args import security


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def client_of(args: argparse.Namespace):
    from ftrl.client.client import Client

    return Client(args.coordinator, security=security(args))


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
    with client_of(args) as client:
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


def why_waiting(actor: dict[str, Any], nodes: list[dict[str, Any]]) -> str | None:
    """Why an actor waits to start (None: it does not wait): a resource no ALIVE worker
    offers at all, or no room on those that do."""
    if actor["state"] not in ("PENDING", "RESTARTING"):
        return None
    need = {k: v for k, v in (actor.get("resources") or {}).items() if v > 0}
    alive = [n for n in nodes if n["state"] == "ALIVE"]
    missing = [f"{k}={v:g}" for k, v in sorted(need.items())
               if not any(n["resources"].get(k, 0.0) >= v for n in alive)]
    if missing:
        return (f"no ALIVE worker offers {', '.join(missing)} (workers advertise custom resources with "
                "`ftrl worker --resources NAME=N`)")
    wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(need.items())) or "nothing"
    return f"waits for room ({wanted}) on the ALIVE workers"


def _job_status(args: argparse.Namespace) -> int:
    """`ftrl status JOB`: one job's record, and why any of its actors waits to start."""
    with client_of(args) as client:
        job = client.job_status(args.job)
        actors = client.actors(f"{job['job_id']}/")
        nodes = client.nodes()
    waiting = [(a["name"], why) for a in actors if (why := why_waiting(a, nodes))]
    if args.json:
        job = {**job, "waiting": dict(waiting)}
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
        *_custom_lines(m),
        ("env runners", f"{m.get('num_healthy_env_runners', '-')} healthy, {job['num_env_runners']} wanted"),
        ("learners", job["num_learners"]),
        ("driver", f"incarnation {job['driver_incarnation']}" if job["driver_incarnation"] else "-"),
        ("last checkpoint", job["last_checkpoint"] or "-"),
        ("output", job["output_dir"] or "-"),
        ("actors", " ".join(job["actors"]) or "-"),
        *(("waiting", f"{name}: {why}") for name, why in waiting),
    ]
    width = max(len(k) for k, _ in lines)
    print("\n".join(f"{k.ljust(width)}  {v}" for k, v in lines))
    return 0


def _custom_lines(row: dict) -> list[tuple[str, str]]:
    """The row's custom metrics (the user's callbacks), one line each, and their errors."""
    custom = row.get("custom_metrics")
    lines = [(f"custom {name}", f"{value:.4g}" if isinstance(value, float) else str(value))
             for name, value in sorted(custom.items())] if isinstance(custom, dict) else []
    errors = row.get("num_callback_errors")
    if errors:
        lines.append(("callback errors", str(errors)))
    return lines


def cmd_submit(args: argparse.Namespace) -> int:
    from ftrl.config.jobs import build_job
    from ftrl.rl.callbacks import check_callbacks

    job = build_job(args)  # ConfigError (exit 2) before any call
    check_callbacks(job.config)  # the user's callbacks class, where the user's code is
    with client_of(args) as client:
        job_id = client.submit(job, job_id=args.job_name, output_dir=args.output, resume=args.resume)
    print(job_id)
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    if args.env_runners is None and args.learners is None:
        print("ftrl scale: error: give at least one of --env-runners, --learners", file=sys.stderr)
        return 2
    with client_of(args) as client:
        job = client.scale(args.job, env_runners=args.env_runners, learners=args.learners)
    print(f"job {job['job_id']} ({job['stage']}): {job['num_env_runners']} env runners, "
          f"{job['num_learners']} learners wanted")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    with client_of(args) as client:
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
    with client_of(args) as client:
        lines = client.logs(args.target, tail=args.lines, follow=args.follow)
        prefix = None
        for name, line in lines:
            if prefix is None:
                prefix = name != args.target  # a job: say whose line it is
            print(f"[{name}] {line}" if prefix else line, flush=args.follow)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ftrl.cli.train import run_train

    return run_train(args)
