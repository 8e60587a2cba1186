"""Actor call rate (small payloads) and bandwidth (64 MiB numpy payloads), each
beside a raw grpc.aio server in another process on this machine (the ceiling).

Usage: python benchmarks/call_rate.py [--calls 2000] [--mib 64]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

import numpy as np
from common import ROOT, emit, env_with_repo

from ftrl.client.cluster import LocalCluster

CHUNK = 1 << 20


async def raw_figures(port: int, calls: int, nbytes: int) -> dict:
    from grpc import aio

    ident = lambda x: x  # noqa: E731
    opts = [("grpc.max_receive_message_length", 4 << 20), ("grpc.max_send_message_length", 4 << 20)]
    async with aio.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
        unary = ch.unary_unary("/t.Raw/Unary", ident, ident)
        stream = ch.stream_stream("/t.Raw/Stream", ident, ident)
        for _ in range(200):
            await unary(b"x")
        t = time.perf_counter()
        for _ in range(calls):
            await unary(b"x" * 64)
        seq = calls / (time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(calls // 50):
            await asyncio.gather(*[unary(b"x" * 64) for _ in range(50)])
        conc = (calls // 50 * 50) / (time.perf_counter() - t)
        payload = b"\1" * nbytes

        def chunks(reply: int):
            head = reply.to_bytes(8, "little")
            yield head + payload[: CHUNK - 8]
            for s in range(CHUNK - 8, len(payload), CHUNK):
                yield payload[s : s + CHUNK]

        async def one(reply: int, send: bool) -> int:
            n = 0
            async for c in stream(chunks(reply) if send else iter([reply.to_bytes(8, "little")])):
                n += len(c)
            return n

        await one(1, True)
        t = time.perf_counter()
        for _ in range(3):
            await one(1, True)
        up = 3 * nbytes / (time.perf_counter() - t) / 1e6
        t = time.perf_counter()
        for _ in range(3):
            await one(nbytes, False)
        down = 3 * nbytes / (time.perf_counter() - t) / 1e6
    return {"calls_per_s_sequential": round(seq), "calls_per_s_50_in_flight": round(conc),
            "mb_per_s_send": round(up), "mb_per_s_receive": round(down)}


async def ftrl_figures(cluster: LocalCluster, calls: int, nbytes: int) -> dict:
    from ftrl.client.aio import AsyncClient

    async with AsyncClient(cluster.address, security=cluster.security) as client:
        h = await client.create_actor("benchmarks.bench_actors:Echo", name="echo", max_restarts=0)
        for _ in range(200):  # warm up both paths
            await h.call("ping")
            await h.call("aping")
        t = time.perf_counter()
        for _ in range(calls):
            await h.call("aping")
        seq = calls / (time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(calls):
            await h.call("ping")
        seq_sync = calls / (time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(calls // 50):
            await asyncio.gather(*[h.call("aping") for _ in range(50)])
        conc = (calls // 50 * 50) / (time.perf_counter() - t)
        x = np.ones(nbytes // 8, dtype=np.float64)
        await h.call("take", x)
        t = time.perf_counter()
        for _ in range(3):
            assert await h.call("take", x) == nbytes
        up = 3 * nbytes / (time.perf_counter() - t) / 1e6
        await h.call("give", nbytes)  # learns that give() replies are large: they stream
        t = time.perf_counter()
        for _ in range(3):
            y = await h.call("give", nbytes)
            assert y.nbytes == nbytes
        down = 3 * nbytes / (time.perf_counter() - t) / 1e6
    return {"calls_per_s_sequential": round(seq), "calls_per_s_50_in_flight": round(conc),
            "mb_per_s_send": round(up), "mb_per_s_receive": round(down),
            "calls_per_s_sequential_sync_method": round(seq_sync)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    nbytes = args.mib << 20
    import uvloop

    raw = subprocess.Popen([sys.executable, f"{ROOT}/benchmarks/raw_echo_server.py"],
                           stdout=subprocess.PIPE, env=env_with_repo())
    try:
        port = int(raw.stdout.readline())
        ceiling = uvloop.run(raw_figures(port, args.calls, nbytes))
    finally:
        raw.kill()
    with LocalCluster(workers=1, slots=2, env=env_with_repo(), log_level="WARNING") as cluster:
        ours = uvloop.run(ftrl_figures(cluster, args.calls, nbytes))
    emit({
        "benchmark": "call_rate",
        "what": "actor calls (64-byte args) and numpy payload bandwidth, ftrl vs raw grpc.aio",
        "payload_mib": args.mib,
        "ftrl": ours,
        "raw_grpc_aio_ceiling": ceiling,
        "ratio": {k: round(ours[k] / ceiling[k], 2) for k in ceiling},
        "note": "send = 64 MiB argument, tiny result; receive = tiny argument, 64 MiB result. "
                "Calls go to an async method; a sync method runs on the actor's call thread "
                "and pays a thread hand-off (calls_per_s_sequential_sync_method).",
    })


if __name__ == "__main__":
    main()
