"""What durable coordinator state costs: SQLite commits and actor-restart decisions.

(a) raw: `SQLiteStore.commit` of one actor-record change per transaction (the real
    schema, WAL, synchronous=FULL), back to back: commits/s and per-commit latency.
(b) decision: a `Controller` on a SQLiteStore, driven without a network (a fake
    clock and send, as tests/unit/coordinator/controller_harness.py): a worker reports an actor
    EXITED, the controller decides the restart, sends StartActor and commits the
    changed records before `report` returns. We time `report(...)`; the STARTED
    answer that follows is not timed. Target: p99 < 20 ms.

The state dir is a temporary dir on the same disk as /work (checked: not tmpfs).

Usage: python benchmarks/state_store.py [--commits 3000] [--decisions 3000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, emit, filesystem, summary

from ftrl import __version__
from ftrl.coordinator.controller import Controller, ControllerConfig
from ftrl.coordinator.records import ActorRecord
from ftrl.coordinator.store import Batch, SQLiteStore
from ftrl.wire import ftrl_pb2 as pb

TARGET_P99_MS = 20.0
NODES = 10
ACTORS_PER_NODE = 50


def state_dir() -> str:
    """A temporary dir on the disk of /work (never tmpfs)."""
    d = tempfile.mkdtemp(prefix="ftrl-store-bench-")
    if os.stat(d).st_dev != os.stat(ROOT).st_dev or filesystem(d)["type"] == "tmpfs":
        shutil.rmtree(d)
        d = tempfile.mkdtemp(prefix="ftrl-store-bench-", dir=os.path.dirname(ROOT))
    return d


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.99 * (len(ordered) - 1))]


def bench_raw(directory: Path, commits: int) -> dict[str, Any]:
    store = SQLiteStore(directory)
    try:
        spec = pb.ActorSpec(name="job/env_runner/0", class_path="ftrl.rl.sampling.env_runner:EnvRunner",
                            max_restarts=-1, resources={"cpu": 1.0})
        rec = ActorRecord(spec=spec, incarnation=1)
        latencies = []
        t0 = time.perf_counter()
        for i in range(commits):
            rec.incarnation = i + 1
            batch = Batch()
            batch.put("actors", rec.name, rec.to_row())
            t = time.perf_counter()
            store.commit(batch)
            latencies.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
        row_bytes = len(rec.to_row())
    finally:
        store.close()
    ms = [x * 1000 for x in latencies]
    return {"commits": commits, "row_bytes": row_bytes,
            "commits_per_s": round(commits / elapsed, 1),
            "latency_ms": summary(ms, 3), "p99_ms": round(p99(ms), 3)}


def bench_decisions(directory: Path, decisions: int) -> dict[str, Any]:
    now = [1000.0]
    starts: list[pb.StartActor] = []

    def send(node_id: str, msg: pb.CoordinatorMessage) -> bool:
        if msg.HasField("start"):
            starts.append(msg.start)
        return True

    store = SQLiteStore(directory)
    try:
        config = ControllerConfig(max_node_failures=-1)  # thousands of deaths on 10 nodes
        c = Controller(config, send=send, clock=lambda: now[0], store=store)
        epochs: dict[str, int] = {}
        for n in range(NODES):
            node_id = f"node-{n}"
            reply = c.register_node(pb.RegisterNodeRequest(
                node_id=node_id, session_id=f"s-{n}", address="127.0.0.1",
                resources={"cpu": float(ACTORS_PER_NODE)}, slots=ACTORS_PER_NODE, version=__version__))
            epochs[node_id] = reply.node_epoch
            c.connect_node(node_id, reply.node_epoch)

        def answer_starts() -> None:
            for s in starts:
                rec = c.actors[s.spec.name]
                c.report(rec.node_id, epochs[rec.node_id], pb.ActorReport(
                    name=s.spec.name, incarnation=s.incarnation, kind=pb.REPORT_STARTED,
                    pid=4242, address=f"127.0.0.1:{10000 + s.incarnation % 50000}"))
            starts.clear()

        names = [f"job/env_runner/{i}" for i in range(NODES * ACTORS_PER_NODE)]
        for name in names:
            c.create_actor(pb.ActorSpec(name=name, class_path="tests.actors:Counter",
                                        max_restarts=-1, resources={"cpu": 1.0}))
        answer_starts()
        commits0 = store.commits
        latencies = []
        for i in range(decisions):
            now[0] += 2.0  # past quick_crash_s: each death restarts at once, no backoff
            for node_id, epoch in epochs.items():
                c.heartbeat(node_id, epoch)
            rec = c.actors[names[i % len(names)]]
            report = pb.ActorReport(name=rec.name, incarnation=rec.incarnation, kind=pb.REPORT_EXITED,
                                    exit_code=-9, reason="killed by signal 9")
            t = time.perf_counter()
            c.report(rec.node_id, epochs[rec.node_id], report)
            latencies.append(time.perf_counter() - t)
            if len(starts) != 1:
                raise RuntimeError(f"expected one StartActor after a death, got {len(starts)}")
            answer_starts()
        restarts = sum(r.restarts for r in c.actors.values())
        commits = store.commits - commits0
    finally:
        store.close()
    ms = [x * 1000 for x in latencies]
    return {"decisions": decisions, "actors": len(names), "nodes": NODES,
            "restarts_recorded": restarts, "commits": commits,
            "latency_ms": summary(ms, 3), "p99_ms": round(p99(ms), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=3000)
    ap.add_argument("--decisions", type=int, default=3000)
    args = ap.parse_args()
    base = state_dir()
    try:
        raw = bench_raw(Path(base) / "raw", args.commits)
        decision = bench_decisions(Path(base) / "decisions", args.decisions)
        fs = filesystem(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    emit({
        "benchmark": "state_store",
        "what": "SQLite state store (WAL, synchronous=FULL): raw commits of one actor record, "
                "and actor-restart decisions by a Controller including their commit",
        "state_dir_filesystem": fs,
        "raw_commit": raw,
        "restart_decision": decision,
        "target_decision_p99_ms": TARGET_P99_MS,
        "meets_target": decision["p99_ms"] < TARGET_P99_MS,
        "pid": os.getpid(),
    })


if __name__ == "__main__":
    main()
