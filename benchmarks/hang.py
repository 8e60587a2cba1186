"""SIGSTOP an actor -> the worker notices it does not answer pings, kills it and
the replacement answers a call. Target: under actor-hang-timeout + 0.5 s.

Usage: python benchmarks/hang.py [--trials 10] [--hang-timeout 1.0]
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from common import emit, env_with_repo, summary

import ftrl
from ftrl.client.cluster import LocalCluster


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--hang-timeout", type=float, default=1.0)
    args = ap.parse_args()
    times = []
    cluster = LocalCluster(workers=1, slots=2, actor_hang_timeout=args.hang_timeout,
                           env=env_with_repo(), log_level="WARNING")
    with cluster:
        client = cluster.client()
        handle = client.create_actor("benchmarks.bench_actors:Echo", name="sleeper", max_restarts=-1)
        for _ in range(args.trials):
            time.sleep(1.5)
            pid = handle.call("pid")
            t0 = time.perf_counter()
            os.kill(pid, signal.SIGSTOP)
            info = client.wait_actor("sleeper", 30, min_incarnation=handle.incarnation + 1)
            assert info["state"] == "ALIVE", info
            while True:
                try:
                    if handle.options(timeout=2).call("pid") != pid:
                        break
                except (ftrl.ActorUnavailableError, ftrl.FtrlTimeoutError):
                    pass
            times.append(time.perf_counter() - t0)
    s = summary(times)
    target = args.hang_timeout + 0.5
    emit({
        "benchmark": "hang",
        "what": "SIGSTOP of an actor -> killed, restarted, answering a call",
        "actor_hang_timeout_s": args.hang_timeout,
        "restart_after_sigstop_s": s,
        "target_s": target,
        "meets_target": s["max"] < target,
    })


if __name__ == "__main__":
    main()
