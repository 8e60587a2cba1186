"""Population-based training figures (issue 28), one JSON object:

- exploit: latency of an exploit in place, from asking the donor's driver for a
  checkpoint to the target's driver training on the donor's weights and new config
  (`checkpoint_now` + `exploit` on two PPO CartPole jobs with one env runner each, a
  [256, 256] model). Target: <= 1 s for a model under 10 MB.
- node_loss: 4 trials (one env runner each) on 2 workers of 2 slots; the worker holding
  two runners is SIGKILLed. The surviving trials' throughput (env steps/s from their
  rows) before and after the kill (target: within 10%), and how long after a new
  worker joins the lost trials train again (target: within 5 s).
- cartpole: examples/cartpole_pbt.toml (population 4, lr / entropy / clip mutations) vs
  the same 4 sampled configs without PBT (FIFO): env steps at which each trial's
  100-episode mean return first reaches 475; target: PBT's best member in fewer steps
  than the median of the FIFO trials.

Usage: python benchmarks/tune.py [--what exploit,node_loss,cartpole] [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT, emit, env_with_repo, first_reach, read_rows, summary, wait_for

import ftrl
from ftrl import tune
from ftrl.client.cluster import LocalCluster


def small_ppo(hiddens: list[int]) -> ftrl.PPOConfig:
    return (ftrl.PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
            .training(train_batch_size=512, minibatch_size=256, num_epochs=2, lr=1e-3,
                      model={"fcnet_hiddens": hiddens})
            .checkpointing(checkpoint_interval=0).debugging(seed=0))


def bench_exploit(repeats: int) -> dict:
    out_dir = Path(tempfile.mkdtemp(prefix="ftrl-bench-exploit-"))
    cluster = LocalCluster(workers=1, slots=2, env=env_with_repo(), log_level="WARNING", spares=2,
                           preload="ftrl.rl.sampling.env_runner")
    latencies, loads, sizes = [], [], []
    with cluster:
        client = cluster.client()
        config = small_ppo([256, 256])
        for job in ("donor", "target"):
            client.submit(config, job_id=job, output_dir=str(out_dir / job))
        wait_for(lambda: all((client.job_status(j)["iteration"] or 0) >= 3 for j in ("donor", "target")), 120,
              "both jobs training")
        donor = client.get_actor("donor/algorithm").options(timeout=60)
        target = client.get_actor("target/algorithm").options(timeout=60)
        pids_before = {a["name"]: a["pid"] for a in client.actors() if a["name"].startswith("target/")}
        for i in range(repeats):
            t0 = time.perf_counter()
            ck = donor.call("checkpoint_now", 30.0)
            t1 = time.perf_counter()
            reply = target.call("exploit", ck["path"], {"lr": 1e-3 * (1.1 ** i)}, 30.0)
            t2 = time.perf_counter()
            latencies.append(t2 - t0)
            loads.append(t2 - t1)
            sizes.append(Path(ck["path"]).stat().st_size)
            assert reply["weights_version"] > 0
            time.sleep(0.3)
        pids_after = {a["name"]: a["pid"] for a in client.actors() if a["name"].startswith("target/")}
        for job in ("donor", "target"):
            client.stop(job, wait=True, timeout=60)
    return {
        "model": "[256, 256] MLP, PPO CartPole, 1 env runner per job",
        "checkpoint_mb": round(statistics.median(sizes) / 1e6, 2),
        "exploit_latency_s": summary(latencies, 3),
        "target_load_s": summary(loads, 3),
        "target_pids_unchanged": pids_before == pids_after,
        "target_s": 1.0,
    }


def bench_node_loss() -> dict:
    storage = Path(tempfile.mkdtemp(prefix="ftrl-bench-tune-loss-"))
    cluster = LocalCluster(workers=2, slots=2, env=env_with_repo(), log_level="WARNING",
                           heartbeat_interval=0.5, heartbeat_timeout=2.0, preload="ftrl.rl.sampling.env_runner")
    with cluster:
        client = cluster.client()
        tuner = ftrl.Tuner(small_ppo([64, 64]).checkpointing(checkpoint_interval=5),
                           param_space={"lr": tune.grid_search([1e-3, 2e-3, 3e-3, 5e-4])},
                           run_config=ftrl.RunConfig(name="loss", storage_path=str(storage), verbose=0,
                                                     stop={"env_steps_sampled": 20_000_000}),
                           client=client)
        done: dict = {}
        thread = threading.Thread(target=lambda: done.setdefault("r", tuner.fit()), daemon=True)
        thread.start()
        expdir = storage / "loss"

        def placed():
            by_node: dict[str, list[str]] = {}
            for a in client.actors():
                if "/env_runner/" in a["name"] and a["state"] == "ALIVE":
                    by_node.setdefault(a["node_id"], []).append(a["name"].split("/")[0])
            return by_node if sum(map(len, by_node.values())) == 4 else None

        by_node = wait_for(placed, 120, "4 trials placed")
        time.sleep(8.0)  # warm

        def rate(trials: list[str], seconds: float) -> float:
            start = {t: (read_rows(expdir / t) or [{"env_steps_sampled": 0}])[-1]["env_steps_sampled"] for t in trials}
            time.sleep(seconds)
            end = {t: (read_rows(expdir / t) or [{"env_steps_sampled": 0}])[-1]["env_steps_sampled"] for t in trials}
            return sum(end[t] - start[t] for t in trials) / seconds

        victim = max(by_node, key=lambda n: len(by_node[n]))
        lost = sorted(set(by_node[victim]))
        survivors = sorted({f"loss-{i}" for i in range(4)} - set(lost))
        before = rate(survivors, 10.0)
        os.killpg(cluster.worker_procs[victim].pid, signal.SIGKILL)
        t_kill = time.monotonic()

        def requeued():
            state = json.loads((expdir / "experiment.json").read_text())
            return all(state["trials"][t]["status"] == "PENDING" for t in lost)

        wait_for(requeued, 60, "lost trials requeued")
        t_requeued = time.monotonic() - t_kill
        time.sleep(3.0)  # the remaining node settles (the lost runners' CPU is free)
        during = rate(survivors, 10.0)
        state = json.loads((expdir / "experiment.json").read_text())
        still_pending = all(state["trials"][t]["status"] == "PENDING" for t in lost)
        rows_before = {t: len(read_rows(expdir / t)) for t in lost}
        t_join = time.monotonic()
        cluster.start_worker(node_id="replacement", slots=2)

        def running_again():
            state = json.loads((expdir / "experiment.json").read_text())
            return all(state["trials"][t]["status"] == "RUNNING" for t in lost)

        wait_for(running_again, 120, "lost trials started again")
        started_s = time.monotonic() - t_join
        wait_for(lambda: all(len(read_rows(expdir / t)) > rows_before[t] for t in lost), 120, "lost trials training again")
        back_s = time.monotonic() - t_join
        for t in range(4):
            client.stop(f"loss-{t}")
        thread.join(120)
    return {
        "trials": 4, "lost_trials": lost, "survivors": survivors,
        "survivor_env_steps_per_s_before": round(before), "survivor_env_steps_per_s_after": round(during),
        "survivor_throughput_ratio": round(during / max(1e-9, before), 3),
        "lost_trials_requeued_after_kill_s": round(t_requeued, 2),
        "lost_trials_pending_until_the_worker_joined": still_pending,
        "lost_trials_started_after_worker_joined_s": round(started_s, 2),
        "lost_trials_training_again_after_worker_joined_s": round(back_s, 2),
        "targets": {"survivor_throughput_ratio": ">= 0.9", "training_again_s": "<= 5"},
    }



def bench_cartpole(seed: int) -> dict:
    from ftrl.tune.tuner import load_experiment_file

    out: dict = {}
    for kind in ("pbt", "fifo"):
        storage = Path(tempfile.mkdtemp(prefix=f"ftrl-bench-cartpole-{kind}-"))
        tuner = load_experiment_file(Path(ROOT) / "examples" / "cartpole_pbt.toml", storage_path=str(storage))
        if kind == "fifo":  # the same sampled trials, each to its stop
            tuner._state["scheduler"] = {"kind": "fifo"}
        else:
            tuner._state["scheduler"]["seed"] = seed
        tuner.run_config.verbose = 0
        t0 = time.monotonic()
        results = tuner.fit()
        reach = {r.trial_id: first_reach(read_rows(Path(r.path)), 475.0) for r in results}
        out[kind] = {"env_steps_to_475": reach, "wall_s": round(time.monotonic() - t0, 1),
                     "configs": {r.trial_id: r.config for r in results}, "counters": results.counters}
    fifo = [v if v is not None else float("inf") for v in out["fifo"]["env_steps_to_475"].values()]
    pbt = [v for v in out["pbt"]["env_steps_to_475"].values() if v is not None]
    out["pbt_best"] = min(pbt) if pbt else None
    out["fifo_median"] = statistics.median(fifo)
    out["pbt_best_beats_fifo_median"] = bool(pbt) and min(pbt) < statistics.median(fifo)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", default="exploit,node_loss,cartpole")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    result: dict = {}
    for what in args.what.split(","):
        if what == "exploit":
            result["exploit"] = bench_exploit(args.repeats)
        elif what == "node_loss":
            result["node_loss"] = bench_node_loss()
        elif what == "cartpole":
            result["cartpole"] = bench_cartpole(args.seed)
        else:
            raise SystemExit(f"unknown --what {what!r}")
    emit(result)


if __name__ == "__main__":
    main()
