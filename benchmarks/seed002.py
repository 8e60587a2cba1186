"""Seed 002's experiment, figures for issue 36, one JSON object:

- exploit_by_key: the latency of an exploit in place by kind of key, on two IMPALA jobs
  (TensorFlow's RMSProp, one env runner each): `checkpoint_now` on the donor, then
  `exploit` on the target with one changed key of each kind: live (`lr`), a live
  optimizer key (`epsilon`), a driver key (`keep_checkpoints`), a learner-thread key
  (`learner_queue_size`), the runners' fragment length (`rollout_fragment_length`) and
  `train_batch_size` (driver, learner thread and fragments). Round trip and the
  driver's own time (`seconds` in the exploit's answer); every process kept its pid.
- timeshare: PBT of 8 PPO CartPole members on room for 2 trials (max_concurrent_trials=2,
  Tune's time-sharing) against the same 8 configs run FIFO with the same cap: the best
  member's env steps to a 100-episode mean return of 475 against the FIFO median, wall
  time, the pauses, and the cost of a pause (stop requested -> job STOPPED, its final
  checkpoint written) and of a resume (job submitted -> its first new row).
- half_runners: one APPO trial with 4 env runners on 2 workers x 2 slots under `ftrl
  tune`; the worker holding 2 of its runners is SIGKILLed: env steps/s from its rows
  before and after (it trains on, not pre-empted).

    python benchmarks/seed002.py [--what exploit_by_key,timeshare,half_runners] [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

from common import emit, env_with_repo, first_reach, read_rows, summary, wait_for

import ftrl
from ftrl import tune
from ftrl.client.cluster import LocalCluster

# --------------------------------------------------------------------------- exploit by kind of key

KEY_KINDS = {  # kind -> (key, values to alternate)
    "live": ("lr", [3e-4, 6e-4]),
    "live_optimizer": ("epsilon", [0.05, 0.1]),
    "driver": ("keep_checkpoints", [2, 3]),
    "learner_thread": ("learner_queue_size", [2, 4]),
    "fragments": ("rollout_fragment_length", [20, 40]),
    "train_batch_size": ("train_batch_size", [320, 160]),
}
#: kinds whose keys make new processes: measured after the in-place ones (whose pids must not change)
PROCESS_KINDS = {
    "env_runners": ("num_envs_per_env_runner", [2, 4]),
    "learners": ("num_learners", [1, 0]),  # into a learner actor and back into the driver
}


def bench_exploit_by_key(repeats: int) -> dict:
    out_dir = Path(tempfile.mkdtemp(prefix="ftrl-bench-seed002-"))
    job = {"algo": "impala", "env": "CartPole-v1", "num_env_runners": 1, "num_envs_per_env_runner": 4,
           "rollout_fragment_length": 40, "train_batch_size": 160, "opt_type": "rmsprop_tf", "epsilon": 0.1,
           "min_time_s_per_iteration": 0.3, "checkpoint_interval": 0, "stop": {"stop_iters": 1_000_000}}
    cluster = LocalCluster(workers=1, slots=4, env=env_with_repo(), log_level="WARNING", spares=2,
                           preload="ftrl.rl.sampling.env_runner")
    result: dict = {}
    with cluster:
        client = cluster.client()
        for name, seed in (("donor", 1), ("target", 2)):
            client.submit({**job, "seed": seed}, job_id=name, output_dir=str(out_dir / name))
        wait_for(lambda: all((client.job_status(j)["iteration"] or 0) >= 3 for j in ("donor", "target")), 180,
              "both jobs training")
        donor = client.get_actor("donor/algorithm").options(timeout=60)
        target = client.get_actor("target/algorithm").options(timeout=60)
        pids = {a["name"]: a["pid"] for a in client.actors("target/")}
        for kinds in (KEY_KINDS, PROCESS_KINDS):
            for kind, (key, values) in kinds.items():
                trips, driver_s, rebuilt = [], [], []
                for i in range(repeats):
                    t0 = time.perf_counter()
                    ck = donor.call("checkpoint_now", 30.0)
                    reply = target.call("exploit", ck["path"], {key: values[i % 2]}, 60.0)
                    trips.append(time.perf_counter() - t0)
                    driver_s.append(float(reply["seconds"]))
                    rebuilt = reply["rebuilt"]
                    time.sleep(0.5)
                result[kind] = {"key": key, "round_trip_s": summary(trips, 3), "in_driver_s": summary(driver_s, 4),
                                "parts_rebuilt": rebuilt}
            if kinds is KEY_KINDS:
                result["target_pids_unchanged"] = pids == {a["name"]: a["pid"] for a in client.actors("target/")}
        rows = read_rows(out_dir / "target")
        result["target_iterations_contiguous"] = [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
        for name in ("donor", "target"):
            client.stop(name, wait=True, timeout=60)
    result["setup"] = ("IMPALA CartPole, rmsprop_tf, 1 env runner x 4 envs per job, 2 jobs on one 4-slot worker; "
                       "round trip = checkpoint_now on the donor + exploit on the target, each at its next "
                       "iteration boundary (iterations of >= 0.3 s); env_runners and learners make new "
                       "processes (the in-driver time includes creating the runner; new learners load the "
                       "state at their first step, after the exploit returned)")
    return result


# --------------------------------------------------------------------------- time-sharing

def _pbt_config() -> ftrl.PPOConfig:
    return (ftrl.PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=0, num_envs_per_env_runner=8, rollout_fragment_length=32)
            .training(train_batch_size=256, minibatch_size=256, num_epochs=8, gamma=0.98, lambda_=0.8,
                      grad_clip=0.5)
            .checkpointing(checkpoint_interval=5, keep_checkpoints=2))


def _watch_jobs(client, names: list[str], stop: threading.Event, events: list[tuple[float, str, str, int]]) -> None:
    """(time, job, stage, iteration) whenever a job's stage or stop request changes."""
    seen: dict[str, tuple[str, bool]] = {}
    while not stop.is_set():
        try:
            jobs = {j["job_id"]: j for j in client.jobs() if j["job_id"] in names}
        except ftrl.FtrlError:
            time.sleep(0.2)
            continue
        now = time.monotonic()
        for name, j in jobs.items():
            key = (j["stage"], bool(j.get("stop_requested")))
            if seen.get(name) != key:
                seen[name] = key
                events.append((now, name, "STOP_REQUESTED" if key[1] and key[0] not in ("STOPPED", "FINISHED")
                               else j["stage"], int(j.get("iteration") or 0)))
        time.sleep(0.05)



def bench_timeshare(seed: int, members: int = 8, stop_steps: int = 150_000) -> dict:
    out: dict = {}
    space = {"lr": tune.loguniform(3e-4, 3e-3), "entropy_coeff": tune.choice([0.0, 0.001, 0.01]),
             "clip_param": tune.uniform(0.1, 0.3)}
    for kind in ("pbt", "fifo"):
        storage = Path(tempfile.mkdtemp(prefix=f"ftrl-bench-timeshare-{kind}-"))
        scheduler = (tune.PopulationBasedTraining(time_attr="env_steps_sampled", perturbation_interval=20_000,
                                                  quantile_fraction=0.25, seed=seed,
                                                  hyperparam_mutations={"lr": tune.loguniform(3e-4, 3e-3),
                                                                        "entropy_coeff": [0.0, 0.001, 0.01],
                                                                        "clip_param": tune.uniform(0.1, 0.3)})
                     if kind == "pbt" else None)
        with LocalCluster(workers=1, slots=2, env=env_with_repo(), log_level="WARNING", spares=2,
                          preload="ftrl.rl.sampling.env_runner") as cluster:
            client = cluster.client()
            tuner = ftrl.Tuner(_pbt_config(), param_space=space,
                               tune_config=ftrl.TuneConfig(num_samples=members, max_concurrent_trials=2, seed=seed,
                                                           metric="episode_return_mean", mode="max",
                                                           scheduler=scheduler),
                               run_config=ftrl.RunConfig(name=kind, storage_path=str(storage), verbose=0,
                                                         stop={"env_steps_sampled": stop_steps}),
                               client=client)
            names = [f"{kind}-{i}" for i in range(members)]
            events: list[tuple[float, str, str, int]] = []
            halt = threading.Event()
            watcher = threading.Thread(target=_watch_jobs, args=(client, names, halt, events), daemon=True)
            watcher.start()
            t0 = time.monotonic()
            results = tuner.fit()
            wall = time.monotonic() - t0
            halt.set()
            watcher.join(5)
        reach = {r.trial_id: first_reach(read_rows(Path(r.path)), 475.0) for r in results}
        pauses, resumes = _turn_costs(events)
        out[kind] = {"env_steps_to_475": reach, "wall_s": round(wall, 1), "counters": results.counters,
                     "pause_s": summary(pauses, 3) if pauses else None,
                     "resume_s": summary(resumes, 3) if resumes else None}
    fifo = [v if v is not None else float("inf") for v in out["fifo"]["env_steps_to_475"].values()]
    pbt = [v for v in out["pbt"]["env_steps_to_475"].values() if v is not None]
    out["pbt_best_env_steps_to_475"] = min(pbt) if pbt else None
    out["fifo_median_env_steps_to_475"] = statistics.median(fifo)
    out["pbt_best_beats_fifo_median"] = bool(pbt) and min(pbt) < statistics.median(fifo)
    out["setup"] = (f"{members} PPO CartPole members (driver-sampled, 8 envs), max_concurrent_trials=2 on a 2-slot "
                    f"worker, stop at {stop_steps} env steps; PBT every 20k env steps, quantile 0.25")
    return out


def _turn_costs(events: list[tuple[float, str, str, int]]) -> tuple[list[float], list[float]]:
    """Pause: a stop request -> the job STOPPED (its final checkpoint written). Resume: the
    job submitted again after it STOPPED -> RUNNING (its driver built, resumed from its
    newest state)."""
    pauses, resumes = [], []
    by_job: dict[str, list[tuple[float, str]]] = {}
    for t, job, stage, _ in events:
        by_job.setdefault(job, []).append((t, stage))
    for seq in by_job.values():
        for (t1, s1), (t2, s2) in itertools.pairwise(seq):
            if s1 == "STOP_REQUESTED" and s2 == "STOPPED":
                pauses.append(t2 - t1)
        stopped = False
        resubmitted_at = None
        for t, stage in seq:
            if stage == "STOPPED":
                stopped, resubmitted_at = True, None
            elif stopped and stage in ("PENDING", "STARTING") and resubmitted_at is None:
                resubmitted_at = t
            elif stage == "RUNNING" and resubmitted_at is not None:
                resumes.append(t - resubmitted_at)
                stopped, resubmitted_at = False, None
    return pauses, resumes


# --------------------------------------------------------------------------- half the runners lost

def bench_half_runners() -> dict:
    storage = Path(tempfile.mkdtemp(prefix="ftrl-bench-half-"))
    config = (ftrl.APPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=4, num_envs_per_env_runner=8, rollout_fragment_length=64)
              .training(train_batch_size=1024)
              .fault_tolerance(env_runner_restore_timeout_s=600.0)
              .checkpointing(checkpoint_interval=10).debugging(seed=0))
    cluster = LocalCluster(workers=2, slots=2, env=env_with_repo(), log_level="WARNING",
                           heartbeat_interval=0.5, heartbeat_timeout=2.0, preload="ftrl.rl.sampling.env_runner")
    with cluster:
        client = cluster.client()
        tuner = ftrl.Tuner(config, run_config=ftrl.RunConfig(name="half", storage_path=str(storage), verbose=0,
                                                             stop={"env_steps_sampled": 50_000_000}), client=client)
        thread = threading.Thread(target=tuner.fit, daemon=True)
        thread.start()
        trial_dir = storage / "half" / "half-0"
        runners = wait_for(lambda: (lambda r: r if len(r) == 4 else None)(
            {a["name"]: a["node_id"] for a in client.actors("half-0/env_runner/") if a["state"] == "ALIVE"}),
            120, "4 runners")
        time.sleep(10.0)

        def rate(seconds: float) -> float:
            start = read_rows(trial_dir)[-1]
            time.sleep(seconds)
            end = read_rows(trial_dir)[-1]
            return (end["env_steps_sampled"] - start["env_steps_sampled"]) / max(1e-9, end["time_s"] - start["time_s"])

        before = rate(15.0)
        driver_node = client.actor("half-0/algorithm")["node_id"]
        tuner_node = client.actor("half/tuner")["node_id"]
        victim = sorted(set(runners.values()), key=lambda n: (n == driver_node, n == tuner_node))[0]
        lost = sum(1 for n in runners.values() if n == victim)
        os.killpg(cluster.worker_procs[victim].pid, signal.SIGKILL)
        wait_for(lambda: any(n["node_id"] == victim and n["state"] == "LOST" for n in client.nodes()), 30, "LOST")
        time.sleep(5.0)
        after = rate(15.0)
        state = json.loads((storage / "half" / "experiment.json").read_text())
        healthy = read_rows(trial_dir)[-1].get("num_healthy_env_runners")
        client.stop("half-0")
        thread.join(60)
    return {"runners": 4, "runners_lost": lost, "env_steps_per_s_before": round(before),
            "env_steps_per_s_after": round(after), "ratio": round(after / max(1e-9, before), 3),
            "num_healthy_env_runners_after": healthy,
            "trial_status_after": state["trials"]["half-0"]["status"],
            "num_preemptions": state["counters"]["num_preemptions"],
            "setup": "APPO CartPole, 4 runners x 8 envs on 2 workers x 2 slots (driver-side learning), "
                     "one worker SIGKILLed; rates from the trial's rows over 15 s"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", default="exploit_by_key,timeshare,half_runners")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--members", type=int, default=8)
    args = ap.parse_args()
    result: dict = {}
    for what in args.what.split(","):
        if what == "exploit_by_key":
            result[what] = bench_exploit_by_key(args.repeats)
        elif what == "timeshare":
            result[what] = bench_timeshare(args.seed, args.members)
        elif what == "half_runners":
            result[what] = bench_half_runners()
        else:
            raise SystemExit(f"unknown --what {what!r}")
    emit(result)


if __name__ == "__main__":
    main()
