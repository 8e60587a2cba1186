"""What security costs on actor calls: call rate with no auth, with the cluster token,
and with the token over mutual TLS, each on a fresh local cluster.

Small calls, sequential and 50 in flight. The clusters run side by side and
are measured in short alternating rounds, so load from elsewhere on the machine
hits each alike: rates are medians over rounds, overheads are medians of the
per-round ratios (each pair measured back to back). A second cluster without auth
(none_control) gives the noise floor: its "overhead" should be ~0. Beside them, the server-side
token check alone (TokenCheck, timed in process) as microseconds per call.
Target (issue 4): token auth costs under 5% of the call rate.

Usage: python benchmarks/auth_overhead.py [--calls 400] [--rounds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import psutil
from common import emit, env_with_repo

from ftrl.client.aio import AsyncClient
from ftrl.client.cluster import LocalCluster
from tests.pki import make_pki
from tests.secure_cluster import SecureCluster

MODES = ("none", "none_control", "token", "tls")


async def sequential(handle, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        await handle.call("ping")
    return calls / (time.perf_counter() - t)


async def in_flight(handle, calls: int, width: int = 50) -> float:
    n = calls // width * width
    t = time.perf_counter()
    for _ in range(calls // width):
        await asyncio.gather(*[handle.call("aping") for _ in range(width)])
    return n / (time.perf_counter() - t)


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def measure(clusters: dict[str, LocalCluster], calls: int, rounds: int) -> tuple[dict, dict]:
    """Calls/s per round, and CPU microseconds per call (actor process + this client process)."""
    clients = {m: AsyncClient(c.address, security=c.security) for m, c in clusters.items()}
    try:
        handles, actors = {}, {}
        for mode, client in clients.items():
            handles[mode] = await client.create_actor("benchmarks.bench_actors:Echo", name="echo",
                                                      max_restarts=0)
            actors[mode] = psutil.Process((await client.actor("echo"))["pid"])
            for _ in range(200):  # warm up channels and the unary fast path
                await handles[mode].call("ping")
        rates: dict = {"sequential": {m: [] for m in clusters}, "in_flight_50": {m: [] for m in clusters}}
        cpu: dict = {"sequential": {m: [] for m in clusters}, "in_flight_50": {m: [] for m in clusters}}
        for r in range(rounds):
            order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]  # rotate who goes first
            for mode in order:
                for kind, fn in (("sequential", sequential), ("in_flight_50", in_flight)):
                    server0, client0 = _cpu(actors[mode]), time.process_time()
                    rates[kind][mode].append(await fn(handles[mode], calls))
                    used = _cpu(actors[mode]) - server0 + time.process_time() - client0
                    cpu[kind][mode].append(used / calls * 1e6)
        return rates, cpu
    finally:
        for client in clients.values():
            await client.close()


async def interceptor_cost(n: int = 50_000) -> float:
    """Microseconds the server-side token check adds to one call (in process)."""

    from ftrl.wire.security import TokenCheck

    metadata = (("authorization", "Bearer " + "t" * 43), ("user-agent", "grpc-python"))
    check = TokenCheck("t" * 43)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            check.refusal(metadata)
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400, help="calls per measurement")
    ap.add_argument("--rounds", type=int, default=40, help="alternating rounds per mode")
    args = ap.parse_args()
    import uvloop

    tmp = tempfile.mkdtemp(prefix="ftrl-auth-bench-")
    pki = make_pki(os.path.join(tmp, "pki"))
    env = env_with_repo()
    clusters = {
        "none": LocalCluster(workers=1, slots=1, env=env, auth=False, log_level="WARNING"),
        # a second cluster without auth: its "overhead" is the noise floor of this machine
        "none_control": LocalCluster(workers=1, slots=1, env=env, auth=False, log_level="WARNING"),
        "token": LocalCluster(workers=1, slots=1, env=env, log_level="WARNING"),
        "tls": SecureCluster.mtls(pki, 1, 1, env=env, log_level="WARNING"),
    }
    load_before = os.getloadavg()
    try:
        for cluster in clusters.values():
            cluster.start()
        raw, cpu = uvloop.run(measure(clusters, args.calls, args.rounds))
    finally:
        for cluster in clusters.values():
            cluster.stop()
    figures: dict[str, dict[str, float]] = {}
    for kind, per_mode in raw.items():
        figures[kind] = {m: round(statistics.median(v)) for m, v in per_mode.items()}
    overhead = {  # median over rounds of the paired ratio
        kind: {m: round(100.0 * statistics.median(1.0 - a / b for a, b in zip(per_mode[m], per_mode["none"],
                                                                              strict=True)), 1)
               for m in ("none_control", "token", "tls")}
        for kind, per_mode in raw.items()
    }
    spread = {
        kind: {m: round(100.0 * (max(v) - min(v)) / statistics.median(v), 1) for m, v in per_mode.items()}
        for kind, per_mode in raw.items()
    }
    cpu_us = {kind: {m: round(statistics.median(v), 1) for m, v in per_mode.items()}
              for kind, per_mode in cpu.items()}
    cpu_overhead = {kind: {m: round(100.0 * (c[m] / c["none"] - 1.0), 1)
                           for m in ("none_control", "token", "tls")}
                    for kind, c in cpu_us.items()}
    worst_token = max(o["token"] for o in overhead.values())
    worst_token_cpu = max(o["token"] for o in cpu_overhead.values())
    check_us = uvloop.run(interceptor_cost())
    seq_us = 1e6 / figures["sequential"]["none"]
    emit({
        "benchmark": "auth_overhead",
        "what": "actor calls/s (tiny args), median over alternating rounds: no auth vs cluster token "
                "vs token over mTLS (each on its own fresh local cluster)",
        "calls_per_measurement": args.calls,
        "rounds": args.rounds,
        "calls_per_s": figures,
        "overhead_pct_vs_none": overhead,
        "round_spread_pct": spread,
        "cpu_us_per_call": cpu_us,
        "cpu_overhead_pct_vs_none": cpu_overhead,
        "target": "token auth costs < 5% of the call rate",
        "token_overhead_worst_pct": worst_token,
        "token_cpu_overhead_worst_pct": worst_token_cpu,
        "meets_target": worst_token < 5.0,
        "token_check_us_per_call": round(check_us, 2),
        "token_check_pct_of_a_sequential_call": round(100.0 * check_us / seq_us, 2),
        "load_avg_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "note": "tls = cluster token + mutual TLS (client and node certificates from a test CA); "
                "overhead = median over rounds of 1 - mode/none (back-to-back pairs); "
                "cpu_us_per_call = CPU time of the actor process plus the client process per call "
                "(less sensitive to other load than calls/s); none_control = a second no-auth "
                "cluster, its overhead is the noise floor; round_spread = (max-min)/median across rounds",
    })


if __name__ == "__main__":
    main()
