"""A long run that stays flat (issue 36): APPO on CartPole for `--minutes` (30) on a durable
coordinator and 2 workers, with an env runner SIGKILLed every `--runner-every` s (2), the
learner actor every `--learner-every` s (30) and a whole worker every `--node-every` s
(300; its process group SIGKILLed, then started again under the same node id after 2 s,
as systemd's Restart=always does). The worker killed is the one not holding the driver,
so the coordinator, one worker and the driver live the whole run.

Failure limits set for the soak (a real run of days needs the same): runner and learner
restarts unlimited in practice (100000), no node exclusion (`--max-node-failures -1`),
failures in a row tolerated 1000.

Measured: the RSS of the long-lived processes (coordinator, the unkilled worker, the
driver; learners too, per incarnation) every 10 s, their growth from the end of warm-up
(`--warmup` minutes, 5) to the end; the coordinator's state (actor records, its SQLite
file) against its caps; the job's rows (every iteration once, none lost or repeated).
One JSON object on stdout, and a PNG of the memory curves (`--png`).

    python benchmarks/soak.py [--minutes 30] [--png benchmarks/results/soak.png]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

import psutil
from common import emit, env_with_repo

from ftrl.client.cluster import LocalCluster

JOB = "soak"


def _rss_mb(pid: int | None) -> float | None:
    """The RSS of `pid`; None for no process, a gone one, or a killed one not reaped yet."""
    try:
        if not pid:
            return None
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process.memory_info().rss / 1e6
    except psutil.Error:
        return None


def _actor(client, name: str) -> dict | None:
    try:
        return client.actor(name)
    except Exception:
        return None


def _kill(pid: int | None) -> bool:
    try:
        if pid:
            os.kill(pid, signal.SIGKILL)
            return True
    except ProcessLookupError:
        pass
    return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--runner-every", type=float, default=2.0)
    ap.add_argument("--learner-every", type=float, default=30.0)
    ap.add_argument("--node-every", type=float, default=300.0)
    ap.add_argument("--png", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ftrl-soak-"))
    job = {"algo": "appo", "env": "CartPole-v1", "num_env_runners": 2, "num_envs_per_env_runner": 8,
           "rollout_fragment_length": 32, "train_batch_size": 512, "num_learners": 1, "num_cpus_per_learner": 0.5,
           "num_cpus_per_env_runner": 0.5, "min_time_s_per_iteration": 1.0, "checkpoint_interval": 10,
           "max_num_env_runner_restarts": 100_000, "max_num_learner_restarts": 100_000,
           "num_consecutive_env_runner_failures_tolerance": 1000, "env_runner_restore_timeout_s": 120.0,
           "learner_wait_timeout_s": 600.0, "tensorboard": False, "stop": {"stop_iters": 10_000_000}}
    cluster = LocalCluster(workers=2, slots=2, env=env_with_repo(), log_level="WARNING", heartbeat_interval=0.5,
                           heartbeat_timeout=2.0, max_node_failures=-1, spares=2,
                           preload="ftrl.rl.sampling.env_runner,torch", state_dir=str(work / "cluster"))
    samples: list[dict] = []
    kills = {"runner": 0, "learner": 0, "node": 0}
    stop = threading.Event()
    with cluster:
        client = cluster.client()
        out = work / "run"
        client.submit(job, job_id=JOB, output_dir=str(out))
        t0 = time.monotonic()
        deadline = t0 + args.minutes * 60

        def killer() -> None:
            rng = random.Random(0)
            next_runner, next_learner, next_node = (t0 + args.runner_every, t0 + args.learner_every,
                                                    t0 + args.node_every)
            while not stop.wait(0.2):
                now = time.monotonic()
                if now >= next_runner:
                    next_runner += args.runner_every
                    info = _actor(client, f"{JOB}/env_runner/{rng.randrange(2)}")
                    if info and info["state"] == "ALIVE" and _kill(info["pid"]):
                        kills["runner"] += 1
                if now >= next_learner:
                    next_learner += args.learner_every
                    info = _actor(client, f"{JOB}/learner/0")
                    if info and info["state"] == "ALIVE" and _kill(info["pid"]):
                        kills["learner"] += 1
                if now >= next_node:
                    next_node += args.node_every
                    driver = _actor(client, f"{JOB}/algorithm") or {}
                    victim = next(n for n in sorted(cluster.worker_procs) if n != driver.get("node_id"))
                    try:
                        os.killpg(cluster.worker_procs[victim].pid, signal.SIGKILL)
                        cluster.worker_procs[victim].wait(10)
                        kills["node"] += 1
                    except (ProcessLookupError, OSError):
                        pass
                    restarts.append((time.monotonic() + 2.0, victim))  # systemd's RestartSec; the main thread starts it

        restarts: list[tuple[float, str]] = []  # (when, node id): a killed worker to start again
        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        next_sample = time.monotonic()
        while time.monotonic() < deadline:
            # a worker dies with the thread that started it: this one lives as long as the cluster
            for when, node in [r for r in restarts if r[0] <= time.monotonic()]:
                restarts.remove((when, node))
                cluster.start_worker(node_id=node, slots=2)
            if time.monotonic() < next_sample:
                time.sleep(0.2)
                continue
            next_sample += 10.0
            driver = _actor(client, f"{JOB}/algorithm") or {}
            learner = _actor(client, f"{JOB}/learner/0") or {}
            long_lived_worker = driver.get("node_id")
            worker = cluster.worker_procs.get(long_lived_worker) if long_lived_worker else None
            samples.append({
                "t_s": round(time.monotonic() - t0, 1),
                "coordinator_mb": _rss_mb(cluster.coordinator_proc.pid if cluster.coordinator_proc else None),
                "worker_mb": _rss_mb(worker.pid if worker else None), "worker_node": long_lived_worker,
                "driver_mb": _rss_mb(driver.get("pid")), "driver_pid": driver.get("pid"),
                "learner_mb": _rss_mb(learner.get("pid")),
                "actor_records": len(client.actors()),
                "state_db_mb": sum(p.stat().st_size for p in (work / "cluster").rglob("*.sqlite*")) / 1e6,
            })
        stop.set()
        thread.join(30)
        status = client.job_status(JOB)
        client.stop(JOB, wait=True, timeout=120)
    rows = []
    for line in (out / "metrics.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    iterations = [r["iteration"] for r in rows]
    warm = [s for s in samples if s["t_s"] >= args.warmup * 60]

    def growth(key: str, same: str | None = None) -> float | None:
        series = [s for s in warm if s[key] is not None]
        if same is not None and series:  # one process throughout (the driver, the same worker)
            series = [s for s in series if s[same] == series[0][same]]
        if len(series) < 2:
            return None
        return round(series[-1][key] / series[0][key] - 1.0, 4)

    result = {
        "minutes": args.minutes, "kills": kills, "stage_at_end": status["stage"],
        "iterations": len(iterations), "iterations_contiguous": iterations == list(range(1, len(iterations) + 1)),
        "driver_restarted": len({s["driver_pid"] for s in samples if s["driver_pid"]}) > 1,
        "rss_growth_after_warmup": {"coordinator": growth("coordinator_mb"),
                                    "worker": growth("worker_mb", same="worker_node"),
                                    "driver": growth("driver_mb", same="driver_pid")},
        "rss_mb_end": {k: samples[-1][k] for k in ("coordinator_mb", "worker_mb", "driver_mb", "learner_mb")},
        "actor_records_max": max(s["actor_records"] for s in samples),
        "state_db_mb_end": round(samples[-1]["state_db_mb"], 2),
        "env_steps_sampled": rows[-1]["env_steps_sampled"] if rows else 0,
        "last_row": {k: rows[-1].get(k) for k in ("num_env_runner_restarts", "num_env_runner_failures",
                                                    "num_samples_lost", "mesh_epoch", "num_driver_resumes")}
        if rows else {},
        "target": "RSS growth after warm-up < 5% for coordinator, worker and driver; every iteration once",
        "failure_limits": {k: job[k] for k in ("max_num_env_runner_restarts", "max_num_learner_restarts",
                                               "num_consecutive_env_runner_failures_tolerance")}
        | {"max_node_failures": -1},
        "samples": samples,
    }
    if args.png:
        _plot(samples, Path(args.png))
        result["png"] = args.png
    emit(result)


def _plot(samples: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    t = [s["t_s"] / 60 for s in samples]
    for key, label in (("coordinator_mb", "coordinator"), ("worker_mb", "worker (never killed)"),
                       ("driver_mb", "driver"), ("learner_mb", "learner (killed every 30 s)")):
        ax.plot(t, [s[key] if s[key] is not None else float("nan") for s in samples], label=label)
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MB)")
    ax.set_title("soak: APPO CartPole, a runner killed every 2 s, the learner every 30 s, a node every 5 min")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
