"""Coordinator failover: SIGKILL a coordinator with --state-dir and restart it on the same dir.

(1) Simulated cluster: a real `ftrl coordinator --state-dir` and 100 simulated workers
    in this process (RegisterNode + a Connect stream each, heartbeats at 1 Hz, StartActor
    answered with REPORT_STARTED, and on a broken link the worker agent's reconnect:
    the same capped backoff and gRPC channel options). Actors are created through the
    client, and one job is submitted; a simulated worker runs its driver and one
    ReportJob(RUNNING) makes it RUNNING. Then the coordinator is SIGKILLed and started
    again on the same dir and port. Measured: the process start (spawn -> first
    successful GetClusterInfo) and, from that moment, the time until all 100 nodes are
    registered again and connected, the job is RUNNING (GetJob) and every actor ALIVE.
    Repeated --trials times. Target: < 2 s beyond the process start.
(2) Real job (unless --no-real-job): a real coordinator and a real `ftrl worker`, a tiny
    CartPole PPO job with 1 env runner submitted with `ftrl.Client.submit`. After a few
    iterations the coordinator is SIGKILLed for 10 s: we count the iterations written to
    the job's metrics.jsonl in the 10 s before and during the outage, then restart the
    coordinator and check the job is RUNNING again with an iteration not lower than before.

Usage: python benchmarks/coordinator_failover.py [--nodes 100] [--actors 200] [--trials 5]
       [--register-wait-for-ready] [--no-real-job]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from common import emit, env_with_repo, summary

from ftrl import __version__
from ftrl.client.aio import AsyncClient
from ftrl.util.backoff import Backoff
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.limits import MAX_CONTROL_MESSAGE
from ftrl.wire.security import Security, discover_token, secure_channel

TARGET_S = 2.0
JOB = {"algo": "PPO", "environment": {"env": "CartPole-v1"},
       "env_runners": {"num_env_runners": 1, "num_envs_per_env_runner": 4},
       "training": {"train_batch_size": 256, "minibatch_size": 256, "num_epochs": 4},
       "stop": {"stop_timesteps": 100_000_000}}
# Each channel its own subchannel (as each worker process has): gRPC otherwise shares one
# connection, and its reconnect backoff, between channels of equal target and options.
OWN_SUBCHANNEL = ("grpc.use_local_subchannel_pool", 1)
T = TypeVar("T")
PROCS: list[subprocess.Popen] = []  # killed at exit, whatever happens
GROUPS: set[int] = set()  # pids of those started in a session of their own (killed as a group)


# ---------------------------------------------------------------- processes

def start_coordinator(state_dir: Path, port: int, log: Path) -> tuple[subprocess.Popen, int]:
    port_file = state_dir.parent / f"port-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftrl", "--log-level", "INFO", "coordinator", "--port", str(port),
         "--port-file", str(port_file), "--state-dir", str(state_dir)],
        env=env_with_repo(), stdout=subprocess.DEVNULL, stderr=open(log, "ab"))
    PROCS.append(proc)
    if port:
        return proc, port
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"the coordinator did not start; see {log}")
        time.sleep(0.01)
    return proc, int(port_file.read_text())


def kill(proc: subprocess.Popen, group: bool = False) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


async def wait_ready(address: str, md: tuple, timeout: float = 30.0) -> float:
    """Poll GetClusterInfo on a fresh channel each try (a channel that failed to connect
    waits out gRPC's reconnect backoff); returns the monotonic time of the first answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        channel = secure_channel(address, Security(), [*channel_options(1 << 20), OWN_SUBCHANNEL])
        try:
            await pb_grpc.CoordinatorStub(channel).GetClusterInfo(pb.ClusterInfoRequest(), timeout=1.0,
                                                                   metadata=md)
            return time.monotonic()
        except Exception:
            await asyncio.sleep(0.01)
        finally:
            await channel.close()
    raise RuntimeError(f"coordinator at {address} not serving after {timeout} s")


async def until(what: str, check: Any, timeout: float, interval: float = 0.02) -> float:
    """Await `check()` until true; returns the monotonic time it first was."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if await check():
                break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic()


# ---------------------------------------------------------------- simulated worker

class SimWorker:
    """A worker agent's coordinator link, without processes: runs what it is told to."""

    def __init__(self, i: int, address: str, md: tuple, wait_for_ready: bool = False) -> None:
        self.node_id, self.session = f"sim-{i}", uuid.uuid4().hex
        self.md = md
        self.channel = secure_channel(address, Security(), [*channel_options(MAX_CONTROL_MESSAGE), OWN_SUBCHANNEL])
        self.stub = pb_grpc.CoordinatorStub(self.channel)
        self.running: dict[str, pb.RunningActor] = {}
        self.epoch = 0
        self.registered_at: list[float] = []
        self.starts = 0
        self.failed_registers = 0
        self.wait_for_ready = wait_for_ready  # the agent does not (yet): see --register-wait-for-ready

    async def run(self) -> None:
        backoff = Backoff(base=0.2, cap=2.0, jitter=0.2)  # as ftrl/worker/link.py
        while True:
            try:
                reply = await self.stub.RegisterNode(pb.RegisterNodeRequest(
                    node_id=self.node_id, session_id=self.session, address="127.0.0.1",
                    resources={"cpu": 4.0}, slots=4, running=list(self.running.values()),
                    hostname="sim", pid=os.getpid(), version=__version__, previous_epoch=self.epoch),
                    timeout=5.0, metadata=self.md, wait_for_ready=self.wait_for_ready or None)
                self.epoch = reply.node_epoch
                for stop in reply.stop:
                    self.running.pop(stop.name, None)
                self.registered_at.append(time.monotonic())
                backoff.reset()
                await self.session_loop()
            except asyncio.CancelledError:
                raise
            except grpc.RpcError:
                self.failed_registers += 1
            except Exception:
                pass
            await asyncio.sleep(backoff.next_delay())

    async def session_loop(self) -> None:
        call = self.stub.Connect(metadata=self.md)
        out: asyncio.Queue[pb.NodeMessage] = asyncio.Queue()

        async def writer() -> None:
            seq = 0
            while True:
                seq += 1
                await call.write(pb.NodeMessage(node_id=self.node_id, epoch=self.epoch,
                                                heartbeat=pb.Heartbeat(seq=seq, num_actors=len(self.running))))
                deadline = time.monotonic() + 1.0
                while (remaining := deadline - time.monotonic()) > 0:
                    try:
                        msg = await asyncio.wait_for(out.get(), remaining)
                    except TimeoutError:
                        break
                    await call.write(msg)

        async def reader() -> None:
            async for msg in call:
                kind = msg.WhichOneof("body")
                if kind == "start":
                    s = msg.start
                    self.starts += 1
                    address = f"127.0.0.1:{20000 + len(self.running)}"
                    self.running[s.spec.name] = pb.RunningActor(
                        spec=s.spec, incarnation=s.incarnation, pid=4242, address=address,
                        node_epoch=self.epoch, restarts=s.restarts, local_until=s.local_until)
                    out.put_nowait(pb.NodeMessage(node_id=self.node_id, epoch=self.epoch, report=pb.ActorReport(
                        name=s.spec.name, incarnation=s.incarnation, kind=pb.REPORT_STARTED, pid=4242,
                        address=address)))
                elif kind == "stop":
                    self.running.pop(msg.stop.name, None)
            raise ConnectionError("the coordinator closed the stream")

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(writer())
                tg.create_task(reader())
        finally:
            call.cancel()


# ---------------------------------------------------------------- (1) simulated cluster

async def simulated(base: Path, n_nodes: int, n_actors: int, trials: int, wait_for_ready: bool) -> dict[str, Any]:
    state, log = base / "state-sim", base / "coordinator-sim.log"
    t_spawn = time.monotonic()
    proc, port = start_coordinator(state, 0, log)
    address = f"127.0.0.1:{port}"
    md = Security(token=discover_token(address)).metadata()
    first_start = await wait_ready(address, md) - t_spawn
    sims = [SimWorker(i, address, md, wait_for_ready) for i in range(n_nodes)]
    tasks = [asyncio.ensure_future(s.run()) for s in sims]
    client = AsyncClient(address)
    probe = secure_channel(address, Security(), [*channel_options(MAX_CONTROL_MESSAGE), OWN_SUBCHANNEL])
    stub = pb_grpc.CoordinatorStub(probe)

    async def nodes_back(after_epoch: int = 0) -> bool:
        nodes = (await stub.ListNodes(pb.ListNodesRequest(), timeout=5, metadata=md)).nodes
        return sum(1 for x in nodes if x.state == pb.NODE_ALIVE and x.connected
                   and x.epoch > after_epoch) == n_nodes

    async def actors_alive() -> bool:
        actors = (await stub.ListActors(pb.ListActorsRequest(), timeout=5, metadata=md)).actors
        return len(actors) == n_actors + 1 and all(a.state == pb.ACTOR_ALIVE for a in actors)

    async def job_running() -> bool:
        job = await stub.GetJob(pb.GetJobRequest(job_id="failover"), timeout=5, metadata=md)
        return job.stage == pb.JOB_RUNNING

    async def trial() -> dict[str, Any]:
        nonlocal proc, probe, stub
        await asyncio.sleep(2.0)  # a few heartbeats
        epoch_before = max(x.epoch for x in (await stub.ListNodes(
            pb.ListNodesRequest(), timeout=5, metadata=md)).nodes)
        starts_before = sum(s.starts for s in sims)
        await probe.close()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        t_kill = time.monotonic()
        for s in sims:
            s.failed_registers = 0
        proc, _ = start_coordinator(state, port, log)
        t_ready = await wait_ready(address, md)
        # a new channel: the old one would wait out gRPC's reconnect backoff first
        probe = secure_channel(address, Security(), [*channel_options(MAX_CONTROL_MESSAGE), OWN_SUBCHANNEL])
        stub = pb_grpc.CoordinatorStub(probe)
        checks = {"nodes": lambda: nodes_back(epoch_before), "job": job_running, "actors": actors_alive}
        first: dict[str, float] = {}  # when each first held (polled together)

        async def all_back() -> bool:
            for what, check in checks.items():
                if what not in first and await check():
                    first[what] = time.monotonic()
            return len(first) == len(checks)

        await until("nodes, job and actors back", all_back, 30)
        registers = [min(t for t in s.registered_at if t > t_kill) - t_ready for s in sims]
        restarted = [a.name for a in (await stub.ListActors(pb.ListActorsRequest(), timeout=5,
                                                             metadata=md)).actors if a.restarts]
        after = max(first.values()) - t_ready
        return {
            "process_start_s": round(t_ready - t_kill, 3),
            "ready_to_all_back_s": round(after, 3),
            "ready_to_all_nodes_registered_s": round(first["nodes"] - t_ready, 3),
            "ready_to_job_running_s": round(first["job"] - t_ready, 3),
            "ready_to_all_actors_alive_s": round(first["actors"] - t_ready, 3),
            "register_replies_after_ready_s": summary(registers, 3),
            "failed_register_attempts_per_node": round(sum(s.failed_registers for s in sims) / n_nodes, 1),
            "actors_started_again": sum(s.starts for s in sims) - starts_before,
            "actors_restarted": len(restarted),
        }

    try:
        await until("the simulated nodes", nodes_back, 60)
        for i in range(n_actors):
            await client.create_actor("tests.actors:Counter", name=f"bench/actor/{i}",
                                      resources={"cpu": 1.0}, wait=False)
        job_id = await client.submit(JOB, job_id="failover", output_dir=str(base / "job-sim"))
        await until("the actors and the driver ALIVE", actors_alive, 60)
        driver = await stub.GetActor(pb.GetActorRequest(name=f"{job_id}/algorithm"), timeout=5, metadata=md)
        await stub.ReportJob(pb.JobReport(job_id=job_id, incarnation=driver.incarnation, stage=pb.JOB_RUNNING,
                                          iteration=1, env_steps_sampled=256), timeout=5, metadata=md)
        await until("the job RUNNING", job_running, 10)
        db_bytes = sum(p.stat().st_size for p in state.glob("coordinator.sqlite*"))
        results = [await trial() for _ in range(trials)]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in sims:
            await s.channel.close()
        await client.close()
        await probe.close()
        kill(proc)
    back = [r["ready_to_all_back_s"] for r in results]
    return {
        "nodes": n_nodes, "actors": n_actors, "jobs": 1, "state_db_bytes": db_bytes,
        "register_wait_for_ready": wait_for_ready,
        "first_start_s": round(first_start, 3),
        "process_start_s": summary([r["process_start_s"] for r in results], 3),
        "ready_to_all_back_s": summary(back, 3),
        "trials": results,
        "target_s": TARGET_S,
        "meets_target_median": statistics.median(back) < TARGET_S,
        "meets_target_every_trial": max(back) < TARGET_S,
    }


# ---------------------------------------------------------------- (2) real job

def last_iteration(output: Path) -> int:
    """The `iteration` of the newest row of the job's metrics.jsonl (0 before the first)."""
    try:
        lines = [line for line in (output / "metrics.jsonl").read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return 0
    for line in reversed(lines):
        with contextlib.suppress(ValueError):  # a row being written
            return int(json.loads(line)["iteration"])
    return 0


def real_job(base: Path, outage_s: float) -> dict[str, Any]:
    import ftrl

    state, log = base / "state-real", base / "coordinator-real.log"
    output = base / "job-real"
    proc, port = start_coordinator(state, 0, log)
    address = f"127.0.0.1:{port}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "ftrl", "--log-level", "INFO", "worker", "--coordinator", address,
         "--slots", "4", "--node-id", "bench-0"],
        env=env_with_repo(), stdout=subprocess.DEVNULL, stderr=open(base / "worker.log", "ab"),
        start_new_session=True)  # its actors are in its process group: all killed at the end
    PROCS.append(worker)
    GROUPS.add(worker.pid)

    def wait_job(client: Any, what: str, ok: Any, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = client.job_status("failover-real")
            except Exception as e:  # the restarted coordinator not serving yet
                status = {"stage": f"unreachable ({type(e).__name__})", "iteration": -1}
            if ok(status):
                return status
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"timed out after {timeout} s waiting for {what}: {status}")
            time.sleep(0.05)

    try:
        with ftrl.Client(address) as client:
            job_id = client.submit(JOB, job_id="failover-real", output_dir=str(output))
            wait_job(client, "RUNNING and 3 iterations", lambda s: s["stage"] == "RUNNING"
                     and last_iteration(output) >= 3, 120)
            it0 = last_iteration(output)
            time.sleep(outage_s)
            calm = last_iteration(output) - it0
            iteration_before = client.job_status(job_id)["iteration"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        it1 = last_iteration(output)
        time.sleep(outage_s)
        it2 = last_iteration(output)
        t_restart = time.monotonic()
        proc, _ = start_coordinator(state, port, log)
        with ftrl.Client(address) as client:
            back = wait_job(client, "RUNNING again", lambda s: s["stage"] == "RUNNING"
                            and s["iteration"] >= iteration_before, 60)
            t_back = time.monotonic()
            caught_up = wait_job(client, "the driver's reports to catch up", lambda s: s["stage"] == "RUNNING"
                                 and s["iteration"] >= it2, 60)
            t_caught_up = time.monotonic()
            with contextlib.suppress(Exception):
                client.stop(job_id)
        return {
            "outage_s": outage_s, "env_runners": 1, "job": JOB,
            "iterations_in_as_long_before": calm, "iterations_during_outage": it2 - it1,
            "iteration_in_record_before_kill": iteration_before,
            "iteration_in_record_after_restart": back["iteration"],
            "stage_after_restart": back["stage"],
            "restart_to_job_running_s": round(t_back - t_restart, 3),
            "restart_to_record_caught_up_s": round(t_caught_up - t_restart, 3),
            "iteration_in_record_caught_up": caught_up["iteration"],
            "training_went_on": it2 > it1,
        }
    finally:
        kill(worker, group=True)
        kill(proc)


def in_scratch_dir(prefix: str, body: Callable[[Path], T]) -> T:
    """`body(dir)` in a new temporary dir: removed after, kept (and named) when it failed;
    every process it started (PROCS) is killed either way."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        result = body(base)
    except BaseException:
        print(f"# failed; logs kept in {base}", file=sys.stderr)
        raise
    else:
        shutil.rmtree(base, ignore_errors=True)
    finally:
        for proc in PROCS:
            kill(proc, group=proc.pid in GROUPS)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--actors", type=int, default=200)
    ap.add_argument("--outage", type=float, default=10.0)
    ap.add_argument("--trials", type=int, default=5, help="kill/restart cycles of the simulated cluster")
    ap.add_argument("--register-wait-for-ready", action="store_true",
                    help="simulated workers send RegisterNode with wait_for_ready (a possible agent change)")
    ap.add_argument("--no-real-job", action="store_true")
    args = ap.parse_args()

    def measure(base: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        import uvloop

        sim = uvloop.run(simulated(base, args.nodes, args.actors, args.trials, args.register_wait_for_ready))
        real: dict[str, Any] = {"measured": False, "why": "--no-real-job"}
        if not args.no_real_job:
            real = real_job(base, args.outage)
        return sim, real

    sim, real = in_scratch_dir("ftrl-failover-", measure)  # /tmp: the same disk as /work here
    emit({
        "benchmark": "coordinator_failover",
        "what": "SIGKILL a coordinator with --state-dir, restart it on the same dir and port",
        "simulated": sim,
        "real_job": real,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "pid": os.getpid(),
    })


if __name__ == "__main__":
    main()
