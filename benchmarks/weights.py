"""Weights to env runners: aggregate MB/s of `EnvRunnerGroup.sync_weights` broadcasting a
flat float32 array of 10 MB and 200 MB to 1, 4 and 8 env-runner actors (CartPole-v1, one
env each) on the embedded local cluster, down the broadcast tree and directly from the
driver, beside a ceiling: the same bytes copied over raw loopback TCP sockets (one
sender thread per receiver process, recv_into a preallocated buffer). Prints ONE JSON
object.

    python benchmarks/weights.py [--sizes-mb 10 200] [--runners 1 4 8] [--repeats 3]

Aggregate MB/s = runners x bytes / time until the last runner confirmed. The runners
are `BenchRunner` actors: EnvRunner itself (same relay code, `set_weights_tree`) whose
`set_weights` keeps any flat float32 array instead of loading it into the policy (a
200 MB array does not fit CartPole's policy; EnvRunner's own checks stay as they are).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from ftrl.rl.sampling.env_runner import EnvRunner  # noqa: E402
from ftrl.wire.limits import CHUNK_BYTES  # noqa: E402

BENCH_RUNNER = "benchmarks.weights:BenchRunner"
TIMEOUT_S = 120.0  # any socket wait of the raw ceiling: a dead receiver fails the run


class BenchRunner(EnvRunner):
    """An EnvRunner whose `set_weights` accepts any flat float32 array (benchmark only):
    it keeps the received array (a view of the call payload) and its version."""

    def set_weights(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> dict[str, Any]:
        arr = np.asarray(weights)
        if arr.dtype != np.float32 or arr.ndim != 1:
            raise ValueError(f"expected flat float32 weights, got {arr.dtype} {arr.shape}")
        with self._lock:
            self._bench_weights = arr
            self.weights_version = int(version)
            return {"weights_version": self.weights_version}

    def weights_checksum(self) -> dict[str, Any]:
        arr = getattr(self, "_bench_weights", None)
        return {"version": self.weights_version, "nbytes": 0 if arr is None else int(arr.nbytes),
                "head": 0.0 if arr is None else float(arr[:1024].sum())}


# ---------------------------------------------------------------- ceiling: raw loopback TCP


def _receiver(port_q: Any, nbytes: int, repeats: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(TIMEOUT_S)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    conn.settimeout(TIMEOUT_S)
    buf = bytearray(nbytes)
    view = memoryview(buf)
    for _ in range(repeats):
        got = 0
        while got < nbytes:
            n = conn.recv_into(view[got:], min(nbytes - got, 4 << 20))
            if n == 0:
                return
            got += n
        conn.sendall(b"k")
    conn.close()


def raw_loopback(nbytes: int, receivers: int, repeats: int) -> list[float]:
    """Seconds per broadcast of `nbytes` to `receivers` processes over raw TCP."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_receiver, args=(q, nbytes, repeats), daemon=True) for _ in range(receivers)]
    for p in procs:
        p.start()
    ports = [q.get(timeout=30) for _ in procs]
    socks = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) for port in ports]
    payload = memoryview(np.ones(nbytes // 4, np.float32).view(np.uint8))
    times = []
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()

            def send(s: socket.socket) -> None:
                s.sendall(payload)
                s.recv(1)

            threads = [threading.Thread(target=send, args=(s,)) for s in socks]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            times.append(time.perf_counter() - t0)
    finally:
        for s in socks:
            s.close()
        for p in procs:
            p.join(10)
    return times


# ---------------------------------------------------------------- through the runtime


def _group(client: Any, n: int, fanout: int, probe_s: float):
    from ftrl.config import PPOConfig
    from ftrl.rl.sampling.runner_group import EnvRunnerGroup

    cfg = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=n, num_envs_per_env_runner=1, rollout_fragment_length=8,
                     num_cpus_per_env_runner=0.1, weights_fanout=fanout,
                     env_runner_health_probe_timeout_s=probe_s)
        .debugging(seed=0)
    )
    import gymnasium as gym

    from ftrl.rl.spaces import space_spec

    env = gym.make("CartPole-v1")
    spec = space_spec(env.observation_space, env.action_space)
    group = EnvRunnerGroup(client, cfg, job_name=f"wbench{n}", space_spec=spec.to_dict(), actor_class=BENCH_RUNNER)
    group.start()
    return group


def broadcast(group: Any, weights: np.ndarray, version: int, fanout: int, plane: bool = True) -> tuple[float, dict]:
    group.weights_fanout = fanout
    saved = group.weights.plane
    if not plane:
        group.weights.plane = None  # the gRPC path (1 MiB streamed chunks)
    t0 = time.perf_counter()
    try:
        group.sync_weights(version, weights)
    finally:
        group.weights.plane = saved
    dt = time.perf_counter() - t0
    stale = [s.name for s in group.slots if s.synced_version != version]
    if stale:
        raise RuntimeError(f"not synced to v{version}: {stale} ({group.last_sync})")
    return dt, dict(group.last_sync)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 200])
    ap.add_argument("--runners", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--fanout", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="timed broadcasts per path and point")
    ap.add_argument("--output", default="")
    args = ap.parse_args()
    from benchmarks.common import machine
    from ftrl.client.cluster import LocalCluster

    t_start = time.monotonic()
    rows: list[dict[str, Any]] = []
    env = {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    version = 0
    with LocalCluster(workers=1, slots=max(args.runners) + 2, preload="ftrl.rl.sampling.env_runner", env=env,
                      log_level="WARNING") as cluster:
        client = cluster.client()
        for n in args.runners:
            group = _group(client, n, args.fanout, probe_s=120.0)
            try:
                version += 1
                broadcast(group, np.ones(1 << 16, np.float32), version, args.fanout)  # open channels
                for size_mb in args.sizes_mb:
                    nbytes = int(size_mb * 1e6) // 4 * 4
                    weights = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
                    repeats = args.repeats
                    # alternate the paths so machine noise hits all alike: gRPC from the
                    # driver to each runner, the weights plane with every runner pulling
                    # from the driver, and the plane's cut-through tree (only where it is
                    # one: at n <= fanout every runner pulls from the driver anyway)
                    paths = {"grpc_direct": (n + 1000, False), "plane_direct": (n + 1000, True)}
                    if n > args.fanout:
                        paths["plane_tree"] = (args.fanout, True)
                    elif n > 2:
                        paths["plane_tree_fanout_2"] = (2, True)  # a real tree at this count
                    for fanout, plane in paths.values():
                        version += 1  # warm-up: receive buffers exist, as in training's steady state
                        broadcast(group, weights, version, fanout, plane)
                    times: dict[str, list[float]] = {p: [] for p in paths}
                    shapes: dict[str, dict] = {}
                    for _ in range(repeats):
                        for path, (fanout, plane) in paths.items():
                            version += 1
                            dt, info = broadcast(group, weights, version, fanout, plane)
                            times[path].append(dt)
                            shapes[path] = info
                    check = group.slots[-1].handle.call("weights_checksum")
                    assert check["nbytes"] == nbytes and abs(check["head"] - float(weights[:1024].sum())) < 1e-3
                    del weights
                    gc.collect()
                    raw = raw_loopback(nbytes, n, repeats)
                    raw_mbs = n * nbytes / 1e6 / statistics.median(raw)
                    row: dict[str, Any] = {
                        "size_mb": size_mb, "runners": n, "repeats": repeats,
                        "raw_loopback_mb_s": round(raw_mbs, 1),
                        "raw_loopback_s": [round(t, 4) for t in raw],
                    }
                    for path in paths:
                        med = statistics.median(times[path])
                        mbs = n * nbytes / 1e6 / med
                        row[path] = {
                            "fanout": paths[path][0] if "direct" not in path else None,
                            "used_tree": bool(shapes[path].get("tree")),
                            "s": [round(t, 4) for t in times[path]],
                            "aggregate_mb_s": round(mbs, 1),
                            "aggregate_mb_s_best": round(n * nbytes / 1e6 / min(times[path]), 1),
                            "vs_raw": round(mbs / raw_mbs, 3),
                        }
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
            finally:
                group.stop()
                gc.collect()
    at200 = [r for r in rows if r["size_mb"] >= 200]
    result = {
        "benchmark": "weights",
        "env": "CartPole-v1",
        "chunk_bytes": CHUNK_BYTES,
        "weights_fanout": args.fanout,
        "results": rows,
        "best_vs_raw_at_200mb": {
            str(r["runners"]): max(v["vs_raw"] for k, v in r.items() if isinstance(v, dict)) for r in at200
        },
        "target_vs_raw_at_200mb": 0.5,
        "wall_s": round(time.monotonic() - t_start, 1),
        "load_avg_1m": os.getloadavg()[0],
        "machine": machine(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
