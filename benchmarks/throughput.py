"""Sampling throughput: env steps/s of 1, 2, 4 EnvRunner actors x E CartPole envs on the
embedded local cluster (real processes, gRPC), beside the same policy and envs stepped in
one plain Python loop (the ceiling; it uses the runners' own policy code, numpy
inference). Prints ONE JSON object.

    python benchmarks/throughput.py [--runners 1 2 4] [--envs 8] [--fragment 128] [--seconds 5]

For each runner count it reports total steps/s with requests pipelined (each runner gets
its next sample() as soon as it answers; by RPC, and `pipelined_channel` on the sample
channel) and in synchronous rounds (all runners, then
wait for all: what PPO does), and `per_core_vs_plain` = (steps/s / min(runners, cores))
/ plain-loop steps/s, all measured in alternating chunks so load noise hits each alike. Target (issue 3): >= 0.85.
`sync_rounds_channel` is the synchronous rounds over the sample channel (ftrl.rl.sampling.sample_plane,
what EnvRunnerGroup uses on a non-TLS cluster) instead of actor RPC. `in_process_runner_vs_plain` measures
the EnvRunner code alone (no RPC) against the plain loop, interleaved to cancel noise.
`plain_loops_parallel_steps_per_s` is min(runners, cores) plain loops in as many processes at
once (what the cores give when all are busy, the machine's own ceiling); the
`..._vs_parallel_plain` figures divide by it instead of by cores x one lone plain loop.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from ftrl.config import PPOConfig  # noqa: E402
from ftrl.rl.models.policy import make_policy  # noqa: E402
from ftrl.rl.sampling.env_runner import EnvRunner  # noqa: E402
from ftrl.rl.sampling.sample_plane import SampleChannel, wait_first  # noqa: E402
from ftrl.rl.spaces import space_spec  # noqa: E402

RUNNER = "ftrl.rl.sampling.env_runner:EnvRunner"


def config(envs: int, fragment: int) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=fragment)
        .debugging(seed=0)
    )


class PlainLoop:
    """The ceiling: one batched policy call per step (the runner's own policy code),
    then a Python loop over the envs with the same reset rule."""

    def __init__(self, envs: int, backend: str = "numpy"):
        self.envs = [gym.make("CartPole-v1") for _ in range(envs)]
        spec = space_spec(self.envs[0].observation_space, self.envs[0].action_space)
        self.policy = make_policy(backend, spec, seed=0)
        self.obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(self.envs)]).astype(np.float32)

    def run(self, seconds: float) -> float:
        n, t0 = 0, time.perf_counter()
        envs, obs, policy = self.envs, self.obs, self.policy
        while time.perf_counter() - t0 < seconds:
            actions, _, _ = policy.act(obs)
            acts = actions.tolist()
            for i, env in enumerate(envs):
                o, _, term, trunc, _ = env.step(acts[i])
                if term or trunc:
                    o, _ = env.reset()
                obs[i] = o
            n += len(envs)
        return n / (time.perf_counter() - t0)


def _plain_worker(conn, envs: int) -> None:
    """A child process running the plain loop on request (seconds in, steps/s out)."""
    loop = PlainLoop(envs)
    loop.run(0.2)
    conn.send("ready")
    while (sec := conn.recv()) is not None:
        conn.send(loop.run(sec))


class ParallelPlain:
    """`k` plain loops in `k` processes, run at the same time: the steps/s the cores give
    when every one is busy (shared caches, memory bandwidth and the VM's scheduling)."""

    def __init__(self, k: int, envs: int):
        ctx = mp.get_context("spawn")  # the benchmark process holds gRPC threads: no fork
        self.conns, self.procs = [], []
        for _ in range(k):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_plain_worker, args=(child, envs), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            if not conn.poll(120) or conn.recv() != "ready":
                raise RuntimeError("a plain-loop process did not start")

    def run(self, seconds: float) -> float:
        for conn in self.conns:
            conn.send(seconds)
        rates = [conn.recv() for conn in self.conns if conn.poll(seconds + 60)]
        if len(rates) != len(self.conns):  # a missing loop would understate the ceiling
            raise RuntimeError("a plain-loop process did not answer")
        return sum(rates)

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join(10)


def in_process(envs: int, fragment: int, seconds: float) -> dict:
    """Interleave short runs of the plain loop and one in-process EnvRunner."""
    plain = PlainLoop(envs)
    runner = EnvRunner(config(envs, fragment), set_torch_threads=True)
    runner.sample()

    def runner_rate(sec: float) -> float:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < sec:
            n += runner.sample()["env_steps"]
        return n / (time.perf_counter() - t0)

    chunks = max(4, int(seconds / 0.5))
    p, r = [], []
    for _ in range(chunks):
        p.append(plain.run(seconds / chunks))
        r.append(runner_rate(seconds / chunks))
    runner.stop()
    return {
        "step_loop": runner.step_loop,  # "c" (ftrl/rl/_vecstep.c) or "python"
        "plain_loop_steps_per_s": round(statistics.median(p)),
        "plain_loop_steps_per_s_best": round(max(p)),
        "in_process_runner_steps_per_s": round(statistics.median(r)),
        "in_process_runner_vs_plain": round(statistics.median(r) / statistics.median(p), 3),
        "in_process_runner_vs_plain_best": round(max(r) / max(p), 3),
    }


def distributed(client, n: int, envs: int, fragment: int, seconds: float, plain: PlainLoop) -> dict:
    """Alternate short chunks of the plain loop, pipelined sampling and synchronous rounds
    (so machine noise hits all three alike); report medians."""
    cfg = config(envs, fragment).to_dict()
    handles = [
        client.create_actor(RUNNER, name=f"bench/env_runner/{n}/{i}", kwargs={"config": cfg, "worker_index": i + 1},
                            max_restarts=0, resources={"cpu": 1})
        for i in range(n)
    ]
    weights = plain.policy.get_flat()
    for h in handles:
        h.call("set_weights", 0, weights)
        h.call("sample")  # warm up
    step_loop = handles[0].call("get_metrics")["step_loop"]

    def pipelined_over(submits: list, sec: float) -> float:
        """Each runner's next request as soon as it answers (`submits`: one callable per
        runner starting a sample): what an asynchronous algorithm that allows stale
        weights can do."""
        steps, t0 = 0, time.perf_counter()
        futs = {submit(): submit for submit in submits}
        while futs:
            done = wait_first(list(futs), None)
            for f in done:
                submit = futs.pop(f)
                steps += f.result()["env_steps"]
                if time.perf_counter() - t0 < sec:
                    futs[submit()] = submit
        return steps / (time.perf_counter() - t0)

    def pipelined(sec: float) -> float:
        return pipelined_over([lambda h=h: h.submit("sample") for h in handles], sec)

    overhead: dict[str, list[float]] = {"rpc": [], "channel": []}
    slowest: dict[str, list[float]] = {"rpc": [], "channel": []}

    def round_of(kind: str, submit) -> int:
        """Run one round (`submit()` starts it); note its overhead: wall time beyond the
        slowest sample() (with more runners than cores this includes waiting for a core)."""
        t = time.perf_counter()
        results = [f.result() for f in submit()]
        wall = time.perf_counter() - t
        slowest[kind].append(max(r["sample_time_s"] for r in results))
        overhead[kind].append(wall - slowest[kind][-1])
        return sum(r["env_steps"] for r in results)

    def rounds(sec: float) -> float:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < sec:
            steps += round_of("rpc", lambda: [h.submit("sample") for h in handles])
        return steps / (time.perf_counter() - t0)

    # the sample channel (ftrl.rl.sampling.sample_plane), as EnvRunnerGroup uses it
    token = client._aio.security.token
    channels = []
    for h in handles:
        info = h.call("sample_address")
        channels.append(SampleChannel(info["address"], token, info["incarnation"]))

    def channel_pipelined(sec: float) -> float:
        return pipelined_over([lambda c=c: c.submit({}, 0, 60.0) for c in channels], sec)

    def channel_rounds(sec: float) -> float:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < sec:
            steps += round_of("channel", lambda: [c.submit({}, 0, 60.0) for c in channels])
        return steps / (time.perf_counter() - t0)

    used = min(n, os.cpu_count() or 1)
    parallel = ParallelPlain(used, envs)
    chunks = max(3, int(seconds))
    p, pp, a, b, c, cp = [], [], [], [], [], []
    for _ in range(chunks):
        p.append(plain.run(seconds / chunks))
        pp.append(parallel.run(seconds / chunks))
        a.append(pipelined(seconds / chunks))
        b.append(rounds(seconds / chunks))
        c.append(channel_rounds(seconds / chunks))
        cp.append(channel_pipelined(seconds / chunks))
    parallel.close()
    for ch in channels:
        ch.close()
    for h in handles:
        client.kill_actor(h.name)
    plain_med = statistics.median(p)
    parallel_med = statistics.median(pp)
    return {
        "runners": n,
        "step_loop": step_loop,
        "plain_loop_steps_per_s": round(plain_med),
        "pipelined_steps_per_s": round(statistics.median(a)),
        "sync_rounds_steps_per_s": round(statistics.median(b)),
        "per_core_vs_plain": round(statistics.median(a) / used / plain_med, 3),
        "per_core_vs_plain_sync_rounds": round(statistics.median(b) / used / plain_med, 3),
        "sync_rounds_channel_steps_per_s": round(statistics.median(c)),
        "per_core_vs_plain_sync_rounds_channel": round(statistics.median(c) / used / plain_med, 3),
        "pipelined_channel_steps_per_s": round(statistics.median(cp)),
        "per_core_vs_plain_pipelined_channel": round(statistics.median(cp) / used / plain_med, 3),
        "plain_loops_parallel_steps_per_s": round(parallel_med),
        "parallel_plain_per_core_vs_plain": round(parallel_med / used / plain_med, 3),
        "sync_rounds_channel_vs_parallel_plain": round(statistics.median(c) / parallel_med, 3),
        # median ms a synchronous round takes beyond its slowest sample() (transport + waits)
        "round_overhead_ms_rpc": round(1000 * statistics.median(overhead["rpc"]), 2),
        "round_overhead_ms_channel": round(1000 * statistics.median(overhead["channel"]), 2),
        # median ms of a round's slowest sample() as the runner timed it
        "slowest_sample_ms_rpc": round(1000 * statistics.median(slowest["rpc"]), 2),
        "slowest_sample_ms_channel": round(1000 * statistics.median(slowest["channel"]), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--fragment", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    base = in_process(args.envs, args.fragment, args.seconds)
    plain = PlainLoop(args.envs)
    results = []
    from ftrl.client.cluster import LocalCluster

    env = {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with LocalCluster(workers=1, slots=max(max(args.runners), cores), preload="ftrl.rl.sampling.env_runner", env=env) as cluster:
        client = cluster.client()
        for n in args.runners:
            results.append(distributed(client, n, args.envs, args.fragment, args.seconds, plain))
    print(json.dumps({
        "benchmark": "throughput",
        "env": "CartPole-v1",
        "envs_per_runner": args.envs,
        "rollout_fragment_length": args.fragment,
        **base,
        "distributed": results,
        "cores": cores,
        "load_avg_1m": os.getloadavg()[0],
        "target_per_core_vs_plain": 0.85,
    }))


if __name__ == "__main__":
    main()
