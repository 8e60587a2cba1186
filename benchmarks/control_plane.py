"""How many nodes one coordinator holds at 1 Hz heartbeats on this machine.

Simulated workers live in this process (register + one Connect stream each,
heartbeats at 1 Hz, staggered); the coordinator is a real `ftrl coordinator`
subprocess. For each node count we measure heartbeat round-trip latency
(write -> ack, which includes the simulator's own scheduling delay, so it is
pessimistic) and count NODE_LOST events (there must be none). The figure is
the largest count with p99 < 50 ms and no false NODE_LOST. Target: 5,000.

With --state-dir DIR the coordinator keeps durable state (SQLite, WAL,
synchronous=FULL) in a fresh subdirectory of DIR per count (removed after), so
registrations and connects are committed to disk before they are answered.

Usage: python benchmarks/control_plane.py [--counts 1000,2500,5000] [--seconds 12]
       [--state-dir DIR] [--join-rate NODES_PER_S]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import psutil
from common import emit, env_with_repo, filesystem, summary

from ftrl import __version__
from ftrl.client.aio import AsyncClient
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.security import Security, discover_token, secure_channel

NODES_PER_CHANNEL = 200


def start_coordinator(timeout_s: float, state_dir: str | None = None) -> tuple[subprocess.Popen, int]:
    d = Path(tempfile.mkdtemp(prefix="ftrl-cp-"))
    port_file = d / "port"
    profile = ["-m", "cProfile", "-o", os.environ["FTRL_PROFILE_COORDINATOR"]] \
        if os.environ.get("FTRL_PROFILE_COORDINATOR") else []
    state = ["--state-dir", state_dir] if state_dir else []
    proc = subprocess.Popen(
        [sys.executable, *profile, "-m", "ftrl", "--log-level", "WARNING", "coordinator", "--port", "0",
         "--port-file", str(port_file), "--heartbeat-interval", "1", "--heartbeat-timeout",
         str(timeout_s), *state],
        env=env_with_repo(), stdout=subprocess.DEVNULL, stderr=open(d / "log", "wb"),
    )
    deadline = time.time() + 30
    while not port_file.exists():
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait(10)
            raise RuntimeError(f"coordinator did not start; see {d / 'log'}")
        time.sleep(0.02)
    return proc, int(port_file.read_text())


async def run_count(n: int, seconds: float, port: int, join_rate: float = 500.0) -> dict:
    # The simulator stands in for n separate worker processes: keep its own garbage
    # collections (one heap for all n) from showing up as heartbeat latency.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    address = f"127.0.0.1:{port}"
    # the coordinator made a token (loopback, none given): call with it, like workers do
    md = Security(token=discover_token(address)).metadata()
    channels = [secure_channel(address, Security(), channel_options(4 << 20))
                for _ in range((n + NODES_PER_CHANNEL - 1) // NODES_PER_CHANNEL)]
    stubs = [pb_grpc.CoordinatorStub(c) for c in channels]
    latencies: list[float] = []
    measuring = asyncio.Event()
    stop = asyncio.Event()
    registered = 0
    broken = 0  # streams the coordinator closed (a node declared lost) or that failed

    async def node(i: int) -> None:
        nonlocal registered, broken
        stub = stubs[i // NODES_PER_CHANNEL]
        node_id = f"sim-{i}"
        reply = await stub.RegisterNode(pb.RegisterNodeRequest(
            node_id=node_id, session_id=f"s{i}", address="127.0.0.1", resources={"cpu": 1},
            slots=1, version=__version__), timeout=60, metadata=md)
        registered += 1
        call = stub.Connect(metadata=md)
        sent: dict[int, float] = {}

        async def reader() -> None:
            async for msg in call:
                t = sent.pop(msg.ack.seq, None)
                for old in [s for s in sent if s < msg.ack.seq]:
                    del sent[old]  # the coordinator acks only every few beats
                if t is not None and measuring.is_set():
                    latencies.append(time.perf_counter() - t)

        rt = asyncio.ensure_future(reader())
        next_t = time.perf_counter()
        seq = 0
        try:
            while not stop.is_set():
                await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
                seq += 1
                sent[seq] = time.perf_counter()
                await call.write(pb.NodeMessage(node_id=node_id, epoch=reply.node_epoch,
                                                heartbeat=pb.Heartbeat(seq=seq)))
                # after the first beat, a random phase: real workers do not beat in step
                next_t += 1.0 if seq > 1 else random.random()
        except (grpc.RpcError, asyncio.InvalidStateError):
            if not stop.is_set():
                broken += 1
        finally:
            call.cancel()
            rt.cancel()

    watcher = AsyncClient(address)
    lost = 0

    async def watch() -> None:
        nonlocal lost
        async for ev in watcher.events(nodes=True):
            if ev["type"] == "NODE_LOST":
                lost += 1

    wt = asyncio.ensure_future(watch())
    tasks = []
    t_join = time.perf_counter()
    for start in range(0, n, 100):  # join in waves of 100 (default every 0.2 s: 500 nodes/s)
        tasks += [asyncio.ensure_future(node(i)) for i in range(start, min(n, start + 100))]
        await asyncio.sleep(100 / join_rate)
    deadline = time.perf_counter() + 120
    while registered < n:
        failed = [t for t in tasks if t.done() and t.exception() is not None]
        if failed:
            raise RuntimeError(f"a simulated node failed: {failed[0].exception()}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"only {registered}/{n} nodes registered in 120 s")
        await asyncio.sleep(0.1)
    join_s = time.perf_counter() - t_join
    await asyncio.sleep(2.0)  # settle
    measuring.set()
    cpu0 = time.process_time()
    await asyncio.sleep(seconds)
    simulator_cpu = (time.process_time() - cpu0) / seconds * 100
    measuring.clear()
    stop.set()
    await asyncio.sleep(0.1)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    wt.cancel()
    await watcher.close()
    for c in channels:
        await c.close()
    if not latencies:
        raise RuntimeError(f"no heartbeat was acked while measuring ({lost} NODE_LOST, {broken} broken)")
    s = summary([x * 1000 for x in latencies], 2)
    p99_ms = sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000
    return {"nodes": n, "join_rate_per_s": join_rate, "all_registered_after_s": round(join_s, 1),
            "heartbeats_measured": len(latencies), "latency_ms": s,
            "simulator_cpu_percent": round(simulator_cpu, 1),
            "false_node_lost": lost, "broken_streams": broken,
            "ok": p99_ms < 50 and lost == 0 and broken == 0, "p99_ms": round(p99_ms, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", default="1000,2500,5000,7500")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--heartbeat-timeout", type=float, default=5.0)
    ap.add_argument("--join-rate", type=float, default=500.0, help="nodes joining per second")
    ap.add_argument("--state-dir", default=None,
                    help="keep the coordinator's state in SQLite under this dir (a fresh subdir per count)")
    args = ap.parse_args()
    results = []
    for n in [int(x) for x in args.counts.split(",")]:
        state = None
        if args.state_dir:
            os.makedirs(args.state_dir, exist_ok=True)
            state = tempfile.mkdtemp(prefix=f"cp-{n}-", dir=args.state_dir)
        proc, port = start_coordinator(args.heartbeat_timeout, state)
        cpu = psutil.Process(proc.pid)
        cpu.cpu_percent(None)
        try:
            import uvloop

            r = uvloop.run(run_count(n, args.seconds, port, args.join_rate))
        finally:
            r_cpu = cpu.cpu_percent(None)
            rss = cpu.memory_info().rss
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if state:
                shutil.rmtree(state, ignore_errors=True)
        r["coordinator_cpu_percent"] = round(r_cpu, 1)
        r["coordinator_rss_mb"] = round(rss / 2**20, 1)
        results.append(r)
        print(f"# {n} nodes: p99 {r['p99_ms']} ms, lost {r['false_node_lost']}", file=sys.stderr)
    held = max([r["nodes"] for r in results if r["ok"]], default=0)
    emit({
        "benchmark": "control_plane",
        "what": "simulated workers heartbeating at 1 Hz against one coordinator",
        "results": results,
        "largest_count_held": held,
        "criteria": "heartbeat p99 < 50 ms and no false NODE_LOST",
        "target_nodes": 5000,
        "meets_target": held >= 5000,
        "state_store": f"SQLite in {args.state_dir} ({' '.join(filesystem(args.state_dir).values())})" if args.state_dir
        else "memory (no --state-dir)",
        "pid": os.getpid(),
    })


if __name__ == "__main__":
    main()
