"""Scraping a coordinator's /metrics and /api/status while 5,000 nodes heartbeat at 1 Hz.

The coordinator is a real `ftrl coordinator --http-port 0` subprocess. Simulated
workers live in this process (as in control_plane.py: register, one Connect stream
each, heartbeats at 1 Hz, staggered). They report actors already running when they
register (as workers do when they rejoin a coordinator that restarted without state:
the coordinator adopts them, ALIVE), and answer every StartActor with a STARTED report,
so the actors made through the API (CreateActor) and a job's driver become ALIVE too.
One job is submitted and its "driver" (this script) reports 600 iterations, so the job
has metrics and a return curve. (Most actors are adopted rather than created: placing one
actor scans every node, ~30-50 ms at 5,000 nodes on a small VM, so 10,000 CreateActor
calls would take minutes.)

First one scrape on its own: the first /api/status encodes every record once (later ones
only what changed). Then, twice for --seconds each: heartbeat round-trip latency (write
-> ack, as control_plane.py) without any HTTP traffic, and the same while a separate
scraper process (started before the window: a Python start-up takes a second of CPU)
fetches /metrics and /api/status every --interval seconds, both at once, as Prometheus
and an open status page would. Prints one JSON object: scrape_ms per route, heartbeat
p99 with and without scrapes, body sizes, the coordinator's loop lag (its own
ftrl_coordinator_loop_lag_seconds), CPU of every busy process (the machine may be
shared). Targets: scrape < 100 ms, heartbeat p99 < 50 ms.

Usage: python benchmarks/http_scrape.py [--nodes 5000] [--actors 10000] [--created 50]
       [--seconds 15] [--interval 1]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import psutil
from common import emit, env_with_repo

from ftrl import __version__
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.security import Security, secure_channel, write_token_file

NODES_PER_CHANNEL = 200
SCRIPT = os.path.abspath(__file__)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))]


def stats_ms(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"n": len(ms), "p50": round(pct(ms, 0.5), 2), "p99": round(pct(ms, 0.99), 2),
            "max": round(max(ms), 2), "mean": round(sum(ms) / len(ms), 2)}


# ---------------------------------------------------------------- the scraper (its own process)


def scrape_main(base: str, token: str, seconds: float, interval: float, routes: list[str],
                start_at: float) -> None:
    """From unix time `start_at`, fetch `routes` together every `interval` s; print timings as JSON."""
    headers = {"Authorization": f"Bearer {token}"}
    out: dict[str, list] = {route: [] for route in routes}
    sizes: dict[str, int] = {}
    last: dict[str, bytes] = {}
    errors: list[str] = []

    def fetch(path: str) -> None:
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers), timeout=30) as r:
                body = r.read()
        except Exception as e:
            errors.append(f"{path}: {e!r}")
            return
        out[path].append(time.perf_counter() - t0)
        sizes[path] = len(body)
        last[path] = body

    time.sleep(max(0.0, start_at - time.time()))  # started (and imported) before the window
    deadline = time.monotonic() + seconds
    next_t = time.monotonic()
    while time.monotonic() < deadline:
        threads = [threading.Thread(target=fetch, args=(p,)) for p in out]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        next_t += interval
        time.sleep(max(0.0, next_t - time.monotonic()))
    status = json.loads(last.get("/api/status", b"{}") or b"{}")
    metrics = last.get("/metrics", b"").decode()
    hb = {}
    for line in metrics.splitlines():
        for name in ("ftrl_heartbeat_handling_seconds_count", "ftrl_heartbeat_handling_seconds_sum"):
            if line.startswith(name + " "):
                hb[name] = float(line.split()[1])
    print(json.dumps({
        "scrape_ms": {p: stats_ms(v) if v else None for p, v in out.items()},
        "body_bytes": sizes, "errors": errors[:5], "error_count": len(errors),
        "status_counts": {
            "nodes": len(status.get("nodes", [])),
            "nodes_alive": sum(1 for n in status.get("nodes", []) if n["state"] == "ALIVE"),
            "actors": len(status.get("actors", [])),
            "actors_alive": sum(1 for a in status.get("actors", []) if a["state"] == "ALIVE"),
            "jobs": [(j["job_id"], j["stage"], j["iteration"]) for j in status.get("jobs", [])],
            "curve_points": {k: len(v["iteration"]) for k, v in status.get("curves", {}).items()},
        },
        "heartbeat_handling_mean_us": round(1e6 * hb["ftrl_heartbeat_handling_seconds_sum"]
                                            / hb["ftrl_heartbeat_handling_seconds_count"], 2)
        if hb.get("ftrl_heartbeat_handling_seconds_count") else None,
    }))


# ---------------------------------------------------------------- the coordinator and the nodes


def start_coordinator(d: Path, token_file: Path) -> tuple[subprocess.Popen, int, int]:
    profile = ["-m", "cProfile", "-o", os.environ["FTRL_PROFILE_COORDINATOR"]] \
        if os.environ.get("FTRL_PROFILE_COORDINATOR") else []
    proc = subprocess.Popen(
        [sys.executable, *profile, "-m", "ftrl", "--log-level", "WARNING", "coordinator", "--port", "0",
         "--port-file", str(d / "port"), "--http-port", "0", "--http-port-file", str(d / "http-port"),
         "--token-file", str(token_file), "--heartbeat-interval", "1", "--heartbeat-timeout", "5",
         "--create-rate", "10000", "--create-burst", "10000"],
        env=env_with_repo(), stdout=subprocess.DEVNULL, stderr=open(d / "coordinator.log", "wb"))
    deadline = time.time() + 30
    while not ((d / "port").exists() and (d / "http-port").exists()):
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait(10)
            raise RuntimeError(f"coordinator did not start; see {d / 'coordinator.log'}")
        time.sleep(0.02)
    return proc, int((d / "port").read_text()), int((d / "http-port").read_text())


class Simulator:
    """n simulated workers on a few channels (see the module docstring)."""

    def __init__(self, n: int, adopted: int, port: int, token: str, http_port: int) -> None:
        self.n = n
        self.http = f"http://127.0.0.1:{http_port}"
        self.gc = GcPauses()
        self.adopted = adopted
        self.address = f"127.0.0.1:{port}"
        self.token = token
        self.md = Security(token=token).metadata()
        self.channels = [secure_channel(self.address, Security(), channel_options(16 << 20))
                         for _ in range((n + NODES_PER_CHANNEL - 1) // NODES_PER_CHANNEL)]
        self.stubs = [pb_grpc.CoordinatorStub(c) for c in self.channels]
        self.latencies: list[float] = []
        self.measuring = False
        self.stop = asyncio.Event()
        self.registered = 0
        self.broken = 0
        self.started_reports = 0
        self.tasks: list[asyncio.Task] = []

    def running(self, i: int) -> list[pb.RunningActor]:
        """The actors node i already runs (adopted by the coordinator): an even share."""
        per, extra = divmod(self.adopted, self.n)
        count = per + (1 if i < extra else 0)
        return [pb.RunningActor(spec=pb.ActorSpec(name=f"sim/{i}/{k}", class_path="bench.sim:Actor",
                                                  resources={"cpu": 1.0}, max_restarts=-1, owner="bench"),
                                incarnation=1, pid=100_000 + 10 * i + k, address=f"127.0.0.1:{20000 + k}")
                for k in range(count)]

    async def node(self, i: int) -> None:
        stub = self.stubs[i // NODES_PER_CHANNEL]
        node_id = f"sim-{i}"
        running = self.running(i)
        reply = await stub.RegisterNode(pb.RegisterNodeRequest(
            node_id=node_id, session_id=f"s{i}", address="127.0.0.1",
            resources={"cpu": float(len(running) + 2)}, slots=len(running) + 2, version=__version__,
            running=running), timeout=120, metadata=self.md)
        self.registered += 1
        epoch = reply.node_epoch
        call = stub.Connect(metadata=self.md)
        lock = asyncio.Lock()
        sent: dict[int, float] = {}

        async def write(msg: pb.NodeMessage) -> None:
            async with lock:
                await call.write(msg)

        async def reader() -> None:
            async for msg in call:
                if msg.HasField("start"):
                    s = msg.start
                    self.started_reports += 1
                    await write(pb.NodeMessage(node_id=node_id, epoch=epoch, report=pb.ActorReport(
                        name=s.spec.name, incarnation=s.incarnation, kind=pb.REPORT_STARTED,
                        pid=200_000 + self.started_reports, address="127.0.0.1:30000")))
                elif msg.HasField("ack"):
                    t = sent.pop(msg.ack.seq, None)
                    for old in [q for q in sent if q < msg.ack.seq]:
                        del sent[old]  # the coordinator acks only every few beats
                    if t is not None and self.measuring:
                        self.latencies.append(time.perf_counter() - t)

        rt = asyncio.ensure_future(reader())
        next_t = time.perf_counter()
        seq = 0
        try:
            while not self.stop.is_set():
                await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
                seq += 1
                sent[seq] = time.perf_counter()
                await write(pb.NodeMessage(node_id=node_id, epoch=epoch, heartbeat=pb.Heartbeat(seq=seq)))
                next_t += 1.0 if seq > 1 else random.random()
        except (grpc.RpcError, asyncio.InvalidStateError):
            if not self.stop.is_set():
                self.broken += 1
        finally:
            call.cancel()
            rt.cancel()

    async def join(self, rate: float = 500.0) -> float:
        t0 = time.perf_counter()
        for start in range(0, self.n, 100):
            self.tasks += [asyncio.ensure_future(self.node(i)) for i in range(start, min(self.n, start + 100))]
            await asyncio.sleep(100 / rate)
        deadline = time.perf_counter() + 180
        while self.registered < self.n:
            failed = [t for t in self.tasks if t.done() and t.exception() is not None]
            if failed:
                raise RuntimeError(f"a simulated node failed: {failed[0].exception()}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {self.registered}/{self.n} nodes registered in 180 s")
            await asyncio.sleep(0.1)
        return time.perf_counter() - t0

    async def close(self) -> None:
        self.stop.set()
        await asyncio.sleep(0.1)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for c in self.channels:
            await c.close()


async def create_actors(sim: Simulator, count: int) -> float:
    """`count` actors through CreateActor, 20 at a time; seconds until all are ALIVE."""
    stub = sim.stubs[0]
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(20)

    async def one(k: int) -> None:
        async with sem:
            await stub.CreateActor(pb.CreateActorRequest(spec=pb.ActorSpec(
                name=f"api/{k}", class_path="bench.sim:Actor", max_restarts=-1)), metadata=sim.md, timeout=60)

    await asyncio.gather(*[one(k) for k in range(count)])
    for _ in range(600):
        reply = await stub.ListActors(pb.ListActorsRequest(prefix="api/"), metadata=sim.md, timeout=60)
        if sum(1 for a in reply.actors if a.state == pb.ACTOR_ALIVE) == count:
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("the actors made through the API did not all become ALIVE")
    return time.perf_counter() - t0


async def submit_job(sim: Simulator, iterations: int) -> None:
    """One job whose driver (started by a simulated node) reports `iterations` rows."""
    stub = sim.stubs[0]
    config = {"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 2}
    await stub.SubmitJob(pb.SubmitJobRequest(job_id="bench-job", config=codec.encode(config),
                                             output_dir=tempfile.mkdtemp(prefix="ftrl-bench-job-")),
                         metadata=sim.md, timeout=60)
    info = await stub.GetActor(pb.GetActorRequest(name="bench-job/algorithm", wait_s=30),
                               metadata=sim.md, timeout=60)
    rows = [pb.JobResult(iteration=i, row=codec.encode({
        "iteration": i, "episode_return_mean": 20 + 460 * (1 - math.exp(-i / 120)), "num_healthy_env_runners": 2}))
        for i in range(1, iterations + 1)]
    await stub.ReportJob(pb.JobReport(job_id="bench-job", incarnation=info.incarnation, stage=pb.JOB_RUNNING,
                                      iteration=iterations, env_steps_sampled=iterations * 4000, rows=rows),
                         metadata=sim.md, timeout=60)


def histogram(base: str, token: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts {le: count} of one histogram on the coordinator's /metrics."""
    req = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def lag_summary(before: dict[float, float], after: dict[float, float]) -> dict:
    """The loop-lag samples between two readings: count, p99 as a bucket bound, share > 50 ms."""
    delta = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = delta[math.inf] if delta else 0
    if not total:
        return {"samples": 0}
    p99 = next(le for le, n in delta.items() if n >= 0.99 * total)
    over = total - max((n for le, n in delta.items() if le <= 0.05), default=0)
    return {"samples": int(total), "p99_at_most_ms": None if p99 == math.inf else round(p99 * 1000, 1),
            "share_over_50ms": round(over / total, 4)}


class GcPauses:
    """This process's garbage collections (the simulator's own stalls show as latency)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif info.get("generation") == 2:
            self.pauses.append(time.perf_counter() - self._t0)

    def take(self) -> dict:
        pauses, self.pauses = self.pauses, []
        return {"full_collections": len(pauses), "max_ms": round(1000 * max(pauses), 1) if pauses else 0.0}


def cpu_times() -> dict[int, tuple[float, str]]:
    """CPU seconds so far of every process (pid -> (seconds, command))."""
    out = {}
    for proc in psutil.process_iter(["pid", "cmdline", "name"]):
        try:
            t = proc.cpu_times()
            out[proc.pid] = (t.user + t.system, " ".join(proc.info["cmdline"] or [proc.info["name"] or ""])[:90])
        except psutil.Error:
            continue
    return out


def busiest(before: dict[int, tuple[float, str]], seconds: float, n: int = 4) -> list[list]:
    """The processes that used the most CPU since `before` (percent of one core)."""
    after = cpu_times()
    used = [(after[p][0] - before.get(p, (0.0, ""))[0], after[p][1]) for p in after]
    return [[round(100 * u / seconds, 1), cmd] for u, cmd in sorted(used, reverse=True)[:n] if u > 0]


async def measure(sim: Simulator, seconds: float, cpu: psutil.Process, scraper: list[str] | None) -> dict:
    proc = None
    if scraper:  # a new Python process takes a second of CPU to start: not in the window
        start_at = time.time() + 4.0
        proc = await asyncio.create_subprocess_exec(  # the token goes in the environment
            *scraper, "--start-at", str(start_at), stdout=asyncio.subprocess.PIPE,
            env={**env_with_repo(), "FTRL_BENCH_TOKEN": sim.token})
        await asyncio.sleep(max(0.0, start_at - time.time()))
    lag0 = await asyncio.to_thread(histogram, sim.http, sim.token, "ftrl_coordinator_loop_lag_seconds")
    sim.gc.take()
    sim.latencies = []
    cpu.cpu_percent(None)
    psutil.cpu_percent(None)
    sim_cpu0 = time.process_time()
    procs0 = cpu_times()
    lost_before = sim.broken
    sim.measuring = True
    await asyncio.sleep(seconds)
    sim.measuring = False
    result: dict = {"coordinator_cpu_percent": round(cpu.cpu_percent(None), 1),
                    "simulator_cpu_percent": round(100 * (time.process_time() - sim_cpu0) / seconds, 1),
                    # all cores, every process: what other work on the machine took shows here
                    "machine_cpu_percent_of_all_cores": round(psutil.cpu_percent(None), 1),
                    "busiest_processes_percent": busiest(procs0, seconds)}
    if proc is not None:
        async with asyncio.timeout(120):
            out, _ = await proc.communicate()
        result.update(json.loads(out))
    lat = sim.latencies
    result["heartbeat_ms"] = stats_ms(lat) if lat else None
    lag1 = await asyncio.to_thread(histogram, sim.http, sim.token, "ftrl_coordinator_loop_lag_seconds")
    result["coordinator_loop_lag"] = lag_summary(lag0, lag1)
    result["simulator_gc"] = sim.gc.take()
    result["broken_streams"] = sim.broken - lost_before
    return result


async def run(args: argparse.Namespace, port: int, http_port: int, token: str, cpu: psutil.Process) -> dict:
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    adopted = args.actors - args.created - 1  # and one job driver
    sim = Simulator(args.nodes, adopted, port, token, http_port)
    try:
        join_s = await sim.join(args.join_rate)
        print(f"# {args.nodes} nodes joined in {join_s:.1f} s", file=sys.stderr)
        created_s = await create_actors(sim, args.created)
        print(f"# {args.created} actors created and ALIVE in {created_s:.1f} s", file=sys.stderr)
        await submit_job(sim, 600)
        await asyncio.sleep(3.0)  # settle
        base = f"http://127.0.0.1:{http_port}"
        scraper = [sys.executable, SCRIPT, "--scrape", base, "--routes", args.routes,
                   "--seconds", str(args.seconds), "--interval", str(args.interval)]
        # The first /api/status encodes every record once (later ones only what changed):
        # timed on its own, then the backlog it leaves on the loop drains before measuring.
        first = await measure(sim, 4.0, cpu, [*scraper[:-4], "--seconds", "0.5", "--interval", "1"])
        await asyncio.sleep(5.0)
        quiet = await measure(sim, args.seconds, cpu, None)
        scraped = await measure(sim, args.seconds, cpu, scraper)
        return {"join_s": round(join_s, 1), "created_via_api_s": round(created_s, 1),
                "start_reports_answered": sim.started_reports, "first_scrape": first,
                "without_scrapes": quiet, "with_scrapes": scraped}
    finally:
        await sim.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--actors", type=int, default=10_000, help="in all: adopted + created + 1 driver")
    ap.add_argument("--created", type=int, default=50, help="of those, made through CreateActor")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--join-rate", type=float, default=250.0, help="nodes registering per second")
    ap.add_argument("--routes", default="/metrics,/api/status", help="what the scraper fetches")
    ap.add_argument("--scrape", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scrape:
        scrape_main(args.scrape, os.environ["FTRL_BENCH_TOKEN"], args.seconds, args.interval,
                    args.routes.split(","), args.start_at)
        return
    load_before = os.getloadavg()[0]
    d = Path(tempfile.mkdtemp(prefix="ftrl-http-"))
    token = write_token_file(d / "token")
    proc, port, http_port = start_coordinator(d, d / "token")
    cpu = psutil.Process(proc.pid)
    try:
        import uvloop

        r = uvloop.run(run(args, port, http_port, token, cpu))
        rss = cpu.memory_info().rss
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    s = r["with_scrapes"]
    hb_quiet = r["without_scrapes"]["heartbeat_ms"]["p99"]
    hb_scraped = s["heartbeat_ms"]["p99"]
    scrape_p99 = {route: v["p99"] for route, v in s["scrape_ms"].items() if v}
    emit({
        "benchmark": "http_scrape",
        "what": f"/metrics and /api/status every {args.interval:g} s for {args.seconds:g} s from another "
                f"process, {args.nodes} simulated nodes heartbeating at 1 Hz, {args.actors} actors",
        "nodes": args.nodes,
        "actors": {"total": args.actors, "adopted_from_node_reports": args.actors - args.created - 1,
                   "created_via_api": args.created, "job_drivers": 1},
        "scrape_ms": s["scrape_ms"],
        "first_scrape_ms": {route: v["max"] for route, v in r["first_scrape"]["scrape_ms"].items() if v},
        "heartbeat_p99_ms_around_the_first_scrape": r["first_scrape"]["heartbeat_ms"]["p99"],
        "body_bytes": s["body_bytes"],
        "status_counts": s["status_counts"],
        "scrape_errors": s["error_count"],
        "heartbeat_p99_ms": {"without_scrapes": hb_quiet, "with_scrapes": hb_scraped},
        "heartbeat_ms": {"without_scrapes": r["without_scrapes"]["heartbeat_ms"],
                         "with_scrapes": s["heartbeat_ms"]},
        "heartbeat_handling_mean_us": s["heartbeat_handling_mean_us"],
        "coordinator_loop_lag": {phase: r[phase]["coordinator_loop_lag"]
                                 for phase in ("first_scrape", "without_scrapes", "with_scrapes")},
        "simulator_gc": {phase: r[phase]["simulator_gc"]
                         for phase in ("first_scrape", "without_scrapes", "with_scrapes")},
        "cpu_percent": {phase: {k.removesuffix("_cpu_percent"): v for k, v in r[phase].items()
                                if "cpu" in k or "busiest" in k}
                        for phase in ("without_scrapes", "with_scrapes")},
        "coordinator_rss_mb": round(rss / 2**20, 1),
        "broken_streams": r["without_scrapes"]["broken_streams"] + s["broken_streams"],
        "setup": {"join_s": r["join_s"], "created_via_api_s": r["created_via_api_s"],
                  "start_reports_answered": r["start_reports_answered"]},
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "targets": {"scrape_ms_p99": 100, "heartbeat_p99_ms": 50},
        "meets_targets": all(v < 100 for v in scrape_p99.values()) and hb_scraped < 50 and s["error_count"] == 0,
    })


if __name__ == "__main__":
    main()
