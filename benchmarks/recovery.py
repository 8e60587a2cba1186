"""SIGKILL an actor process -> its replacement is ALIVE and answers a call.

Prints one JSON object: the recovery time over N kills (median target < 0.5 s),
beside the floor costs: starting a fresh actor host process (Python start +
imports, which warm spares hide) and the spare's own start-to-serving time.
Usage: python benchmarks/recovery.py [--kills 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import tempfile
import time
from pathlib import Path

from common import emit, env_with_repo, summary

import ftrl
from ftrl.client.cluster import LocalCluster


def measure_recovery(kills: int, gap_s: float) -> list[float]:
    cluster = LocalCluster(workers=1, slots=2, env=env_with_repo(), log_level="WARNING")
    recoveries = []
    with cluster:
        client = cluster.client()
        handle = client.create_actor("benchmarks.bench_actors:Echo", name="victim", max_restarts=-1)
        handle.call("ping")
        for _ in range(kills):
            time.sleep(gap_s)  # let the spare pool refill and stay out of crash-loop backoff
            pid = handle.call("pid")
            before = handle.incarnation
            t0 = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            while True:  # what a user sees: keep calling until the new incarnation answers
                try:
                    new_pid = handle.call("pid")
                    if new_pid != pid:
                        break
                except ftrl.ActorUnavailableError:
                    pass
            recoveries.append(time.perf_counter() - t0)
            assert handle.incarnation == before + 1, (before, handle.incarnation)
    return recoveries


async def host_start_floor(samples: int) -> list[float]:
    from ftrl.worker.processes import spawn_host

    times = []
    log = Path(tempfile.mkdtemp()) / "spare.log"
    for _ in range(samples):
        t0 = time.perf_counter()
        host = await spawn_host("", log, {})
        await host.read()  # "ready": interpreter up, grpc and ftrl imported
        times.append(time.perf_counter() - t0)
        await host.stop(1.0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--gap", type=float, default=1.5, help="seconds between kills")
    args = ap.parse_args()
    recoveries = measure_recovery(args.kills, args.gap)
    floor = asyncio.run(host_start_floor(5))
    s = summary(recoveries)
    emit({
        "benchmark": "recovery",
        "what": "SIGKILL of an actor process -> replacement ALIVE and answering a call (client view)",
        "kills": args.kills,
        "recovery_s": s,
        "target_median_s": 0.5,
        "meets_target": s["median"] < 0.5,
        "floor_fresh_host_process_s": summary(floor),
        "note": "a warm spare (pre-started host with grpc/ftrl imported) takes the restart, so "
                "recovery skips the fresh-process floor; it costs death notice + constructor + "
                "server start + the coordinator learning the new address",
    })


if __name__ == "__main__":
    main()
