"""Status freshness after a coordinator outage: how soon `job_status` shows the driver's iteration.

A real `ftrl coordinator --state-dir` and a real `ftrl worker`, a tiny CartPole PPO job
with 1 env runner (the job of coordinator_failover.py). Repeated --trials times (default 5):
the coordinator is SIGKILLed for --outage s (10) while the job trains and restarted on the
same state dir and port. t0 = the first client call it answers (GetJob on a fresh channel
each try, each channel with a subchannel of its own: no client-side reconnect backoff in
the figure). From t0 GetJob is polled every 20 ms until the shown `iteration`, and then the
shown metrics row's iteration, is within 1 of the driver's own iteration (the newest row of
the job's metrics.jsonl). Reported: those delays (median / max over the trials), and
whether the shown iteration (or metrics row) ever went backwards: below the highest shown
before, the kill included.

Target: the shown iteration within one of the driver's < 1 s after t0.

Usage: python benchmarks/status_freshness.py [--trials 5] [--outage 10] [--calm 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import emit, env_with_repo, summary
from coordinator_failover import (
    GROUPS,
    JOB,
    OWN_SUBCHANNEL,
    PROCS,
    in_scratch_dir,
    kill,
    last_iteration,
    start_coordinator,
)

from ftrl.client.aio import AsyncClient
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.convert import job_dict
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.security import Security, discover_token, secure_channel

TARGET_S = 1.0
JOB_ID = "fresh"
POLL_S = 0.02


class Poller:
    """GetJob on a channel of its own; remembers the highest iteration shown so far."""

    def __init__(self, address: str, md: tuple) -> None:
        self.address, self.md = address, md
        self.channel: Any = None
        self.highest = {"iteration": 0, "metrics": 0}
        self.backwards: list[dict[str, int]] = []

    def open(self) -> None:
        self.channel = secure_channel(self.address, Security(), [*channel_options(4 << 20), OWN_SUBCHANNEL])

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None

    async def status(self, timeout: float = 2.0) -> dict[str, Any]:
        """The job's record; notes any shown value below the highest seen before."""
        stub = pb_grpc.CoordinatorStub(self.channel)
        job = job_dict(await stub.GetJob(pb.GetJobRequest(job_id=JOB_ID), timeout=timeout, metadata=self.md))
        shown = {"iteration": job["iteration"], "metrics": int(job["metrics"].get("iteration") or 0)}
        for key, value in shown.items():
            if value < self.highest[key]:
                self.backwards.append({"what": key, "shown": value, "highest": self.highest[key]})
            self.highest[key] = max(self.highest[key], value)
        job["metrics_iteration"] = shown["metrics"]
        return job

    async def first_answer(self, timeout: float = 60.0) -> tuple[float, dict[str, Any]]:
        """Try GetJob on a fresh channel until one is answered: (its monotonic time, the record)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.open()
            try:
                job = await self.status(timeout=1.0)
                return time.monotonic(), job
            except Exception:
                await self.close()
                await asyncio.sleep(0.01)
        raise RuntimeError(f"the coordinator at {self.address} did not answer within {timeout} s")


async def calm(poller: Poller, seconds: float) -> dict[str, Any]:
    """Poll while the job trains undisturbed; the last record."""
    deadline = time.monotonic() + seconds
    job = await poller.status()
    while time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        job = await poller.status()
    return job


async def catch_up(poller: Poller, output: Path, t0: float, first: dict[str, Any],
                   timeout: float = 60.0) -> dict[str, Any]:
    """Poll from t0 until the shown iteration and metrics row are within 1 of the driver's."""
    found: dict[str, float] = {}
    job, polls = first, 1
    while True:
        driver = last_iteration(output)
        now = time.monotonic()
        for key in ("iteration", "metrics_iteration"):
            if key not in found and job[key] >= driver - 1:
                found[key] = now - t0
        if len(found) == 2:
            break
        if now - t0 > timeout:
            raise RuntimeError(f"the record did not catch up with the driver ({driver}) in {timeout} s: "
                               f"iteration {job['iteration']}, metrics row {job['metrics_iteration']}")
        await asyncio.sleep(POLL_S)
        job = await poller.status()
        polls += 1
    return {"iteration_within_1_s": round(found["iteration"], 3),
            "metrics_within_1_s": round(found["metrics_iteration"], 3),
            "shown_at_t0": first["iteration"], "metrics_at_t0": first["metrics_iteration"],
            "driver_at_catch_up": driver, "polls": polls}


async def trial(poller: Poller, state: Path, port: int, log: Path, output: Path, proc: subprocess.Popen,
                outage_s: float, calm_s: float) -> tuple[subprocess.Popen, dict[str, Any]]:
    before = await calm(poller, calm_s)
    await poller.close()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    it_kill = last_iteration(output)
    await asyncio.sleep(outage_s)
    it_restart = last_iteration(output)
    t_restart = time.monotonic()
    proc, _ = start_coordinator(state, port, log)
    t0, first = await poller.first_answer()
    result = await catch_up(poller, output, t0, first)
    return proc, {"shown_before_kill": before["iteration"], "driver_iterations_during_outage": it_restart - it_kill,
                  "restart_to_first_answer_s": round(t0 - t_restart, 3), **result}


def start_worker(address: str, base: Path) -> subprocess.Popen:
    """A real `ftrl worker` in a session of its own (its actors are killed with it)."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "ftrl", "--log-level", "INFO", "worker", "--coordinator", address,
         "--slots", "4", "--node-id", "fresh-0"],
        env=env_with_repo(), stdout=subprocess.DEVNULL, stderr=open(base / "worker.log", "ab"),
        start_new_session=True)
    PROCS.append(worker)
    GROUPS.add(worker.pid)
    return worker


async def run(base: Path, trials: int, outage_s: float, calm_s: float) -> dict[str, Any]:
    state, log, output = base / "state", base / "coordinator.log", base / "job"
    proc, port = start_coordinator(state, 0, log)
    address = f"127.0.0.1:{port}"
    worker = start_worker(address, base)
    poller = Poller(address, Security(token=discover_token(address)).metadata())
    client = AsyncClient(address)
    try:
        await client.submit(JOB, job_id=JOB_ID, output_dir=str(output))
        deadline = time.monotonic() + 180
        while last_iteration(output) < 3:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"the job did not train; see {base}")
            await asyncio.sleep(0.2)
        await client.close()
        poller.open()
        results = []
        for _ in range(trials):
            proc, result = await trial(poller, state, port, log, output, proc, outage_s, calm_s)
            results.append(result)
        await poller.close()
    finally:
        await client.close()
        await poller.close()
        kill(worker, group=True)
        kill(proc)
    delays = [r["iteration_within_1_s"] for r in results]
    return {
        "trials": results,
        "iteration_within_1_s": summary(delays, 3),
        "metrics_within_1_s": summary([r["metrics_within_1_s"] for r in results], 3),
        "went_backwards": bool(poller.backwards),
        "backwards": poller.backwards[:20],
        "target_s": TARGET_S,
        "meets_target_median": statistics.median(delays) < TARGET_S,
        "meets_target_every_trial": max(delays) < TARGET_S,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--outage", type=float, default=10.0, help="seconds the coordinator is down")
    ap.add_argument("--calm", type=float, default=3.0, help="seconds of undisturbed training before each kill")
    args = ap.parse_args()
    result = in_scratch_dir("ftrl-freshness-", lambda base: asyncio.run(run(base, args.trials, args.outage,
                                                                         args.calm)))
    reconnect = dict(channel_options(0)).get("grpc.max_reconnect_backoff_ms")
    emit({
        "benchmark": "status_freshness",
        "what": "SIGKILL a coordinator with --state-dir while a job trains, restart it: delay from its "
                "first answer until job_status shows the driver's iteration (within 1)",
        "outage_s": args.outage, "poll_s": POLL_S, "grpc_max_reconnect_backoff_ms": reconnect,
        "env_runners": 1, "job": JOB,
        **result,
        "load_average_1m": round(os.getloadavg()[0], 2),
    })


if __name__ == "__main__":
    main()
