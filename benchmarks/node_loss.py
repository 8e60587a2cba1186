"""SIGKILL a worker -> the coordinator declares NODE_LOST: at once when its stream ends and
its port refuses connections (the process is gone, the machine up), else when heartbeats
stop. Target: under heartbeat timeout + 0.5 s after the kill.

Usage: python benchmarks/node_loss.py [--trials 5] [--heartbeat-timeout 2.0]
"""

from __future__ import annotations

import argparse
import time

from common import emit, env_with_repo, summary

from ftrl.client.cluster import LocalCluster


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--heartbeat-interval", type=float, default=0.5)
    ap.add_argument("--heartbeat-timeout", type=float, default=2.0)
    args = ap.parse_args()
    lost, moved = [], []
    cluster = LocalCluster(workers=0, slots=2, heartbeat_interval=args.heartbeat_interval,
                           heartbeat_timeout=args.heartbeat_timeout, env=env_with_repo(),
                           log_level="WARNING")
    with cluster:
        client = cluster.client()
        spare_node = cluster.start_worker("survivor")
        cluster.wait_nodes([spare_node])
        for trial in range(args.trials):
            # Fill the survivor so the next actor lands on the victim, then free it.
            client.create_actor("benchmarks.bench_actors:Echo", name=f"filler-{trial}",
                                resources={"cpu": 2})
            victim = cluster.start_worker(f"victim-{trial}")
            cluster.wait_nodes([victim])
            name = f"actor-{trial}"
            client.create_actor("benchmarks.bench_actors:Echo", name=name, max_restarts=-1,
                                resources={"cpu": 2})
            assert client.actor(name)["node_id"] == victim
            client.kill_actor(f"filler-{trial}")
            events = client.events(nodes=True, after_seq=client.cluster_info()["event_seq"], timeout=30)
            t0 = time.perf_counter()
            cluster.worker_procs[victim].kill()
            t_lost = None
            for ev in events:
                if ev["type"] == "NODE_LOST" and ev["node_id"] == victim and t_lost is None:
                    t_lost = time.perf_counter() - t0
                if ev["type"] == "RESTARTED" and ev["actor"] == name:
                    moved.append(time.perf_counter() - t0)
                    break
            lost.append(t_lost)
            client.kill_actor(name)
    s = summary([x for x in lost if x is not None])
    target = args.heartbeat_timeout + 0.5
    emit({
        "benchmark": "node_loss",
        "what": "worker SIGKILL -> NODE_LOST event; and -> its actor RESTARTED on another node",
        "heartbeat_interval_s": args.heartbeat_interval,
        "heartbeat_timeout_s": args.heartbeat_timeout,
        "node_lost_after_kill_s": s,
        "actor_moved_after_kill_s": summary(moved) if moved else None,
        "target_s": target,
        "meets_target": s["max"] < target,
    })


if __name__ == "__main__":
    main()
