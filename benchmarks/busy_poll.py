"""Busy-polling on vs off: synchronous sample-channel rounds of N runner actors with
`sample_busy_poll_s` = each given value, on one embedded cluster, in alternating 1-s
chunks (so machine noise hits every value alike), beside the plain loop of
throughput.py. Prints ONE JSON object.

    python benchmarks/busy_poll.py [--runners 2] [--values 0 0.01] [--chunks 8]

One set of N runners per value lives in the cluster at once (the idle sets sleep).
`per_core_vs_plain` is throughput.py's figure: (steps/s / min(N, cores)) / plain-loop
steps/s; `round_overhead_ms` is a round's wall time beyond its slowest sample().
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import throughput  # noqa: E402

from ftrl.client.cluster import LocalCluster  # noqa: E402
from ftrl.rl.sampling.runner_channels import channel_token as _channel_token  # noqa: E402
from ftrl.rl.sampling.sample_plane import SampleChannel  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--values", type=float, nargs="+", default=[0.0, 0.01])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--fragment", type=int, default=128)
    args = parser.parse_args()
    n, chunk = args.runners, 1.0
    plain = throughput.PlainLoop(args.envs)
    env = {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    slots = n * len(args.values) + 2
    with LocalCluster(workers=1, slots=slots, preload="ftrl.rl.sampling.env_runner", env=env) as cluster:
        client = cluster.client()
        token = _channel_token(client)
        weights = plain.policy.get_flat()
        channels: dict[float, list[SampleChannel]] = {}
        for k, value in enumerate(args.values):
            cfg = throughput.config(args.envs, args.fragment).env_runners(sample_busy_poll_s=value).to_dict()
            channels[value] = []
            for i in range(n):
                handle = client.create_actor(throughput.RUNNER, name=f"busy_poll/{k}/{i}", max_restarts=0,
                                             kwargs={"config": cfg, "worker_index": i + 1}, resources={"cpu": 1})
                handle.call("set_weights", 0, weights)
                handle.call("sample")  # warm up
                info = handle.call("sample_address")
                channels[value].append(SampleChannel(info["address"], token, info["incarnation"]))
        rates: dict[float, list[float]] = {v: [] for v in args.values}
        overhead: dict[float, list[float]] = {v: [] for v in args.values}
        plain_rates = []
        for _ in range(args.chunks):
            plain_rates.append(plain.run(chunk))
            for value in args.values:
                steps, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < chunk:
                    t = time.perf_counter()
                    results = [f.result(timeout=60) for f in [c.submit({}, 0, 60.0) for c in channels[value]]]
                    overhead[value].append(time.perf_counter() - t - max(r["sample_time_s"] for r in results))
                    steps += sum(r["env_steps"] for r in results)
                rates[value].append(steps / (time.perf_counter() - t0))
        for chans in channels.values():
            for ch in chans:
                ch.close()
    used = min(n, os.cpu_count() or 1)
    plain_med = statistics.median(plain_rates)
    print(json.dumps({
        "benchmark": "busy_poll",
        "runners": n,
        "envs_per_runner": args.envs,
        "rollout_fragment_length": args.fragment,
        "plain_loop_steps_per_s": round(plain_med),
        "results": [{
            "sample_busy_poll_s": value,
            "sync_rounds_steps_per_s": round(statistics.median(rates[value])),
            "per_core_vs_plain": round(statistics.median(rates[value]) / used / plain_med, 3),
            "round_overhead_ms": round(1000 * statistics.median(overhead[value]), 3),
            "round_overhead_ms_p90": round(1000 * sorted(overhead[value])[int(0.9 * len(overhead[value]))], 3),
        } for value in args.values],
        "cores": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
