"""`ftrl tune` / `ftrl.Tuner` on real coordinator and worker processes: FIFO grids,
PBT exploits in place (the target's runners keep their pids), a worker SIGKILLed under
two of four trials (the others go on, the lost ones resume from checkpoints), and a
whole experiment killed (coordinator included) and resumed with `--resume`."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ftrl
from ftrl import tune
from tests.cluster import REPO, cluster_env, wait_until


def small_ppo(runners: int = 1, batch: int = 256) -> ftrl.PPOConfig:
    return (ftrl.PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=runners, num_envs_per_env_runner=4)
            .training(train_batch_size=batch, minibatch_size=128, num_epochs=2, lr=1e-3)
            .checkpointing(checkpoint_interval=5, keep_checkpoints=2)
            .debugging(seed=0))


def rows(trial_dir: Path) -> list[dict]:
    out = []
    for line in (trial_dir / "metrics.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def test_fifo_grid_runs_every_trial_to_its_stop_and_reports(make_cluster, tmp_path):
    cluster = make_cluster(workers=1, slots=2)
    client = cluster.client()
    results = ftrl.Tuner(
        small_ppo(runners=0),
        param_space={"lr": tune.grid_search([1e-3, 3e-3]), "entropy_coeff": tune.choice([0.0, 0.01])},
        tune_config=ftrl.TuneConfig(num_samples=1, max_concurrent_trials=1, seed=3),
        run_config=ftrl.RunConfig(name="grid", storage_path=str(tmp_path), stop={"training_iteration": 3}),
        client=client,
    ).fit()
    assert results.status == "FINISHED"
    assert [r.status for r in results] == ["TERMINATED", "TERMINATED"]
    assert sorted(r.config["lr"] for r in results) == [1e-3, 3e-3]
    for r in results:
        assert r.metrics["iteration"] == 3
        assert [row["iteration"] for row in rows(Path(r.path))] == [1, 2, 3]
        assert r.checkpoint is not None and Path(r.checkpoint).exists()
    # max_concurrent_trials=1: the second trial started after the first one ended
    state = json.loads((tmp_path / "grid" / "experiment.json").read_text())
    t0, t1 = state["trials"]["grid-0"], state["trials"]["grid-1"]
    assert t1["started_at"] >= t0["started_at"]
    assert results.get_best_result().trial_id in ("grid-0", "grid-1")
    # the status table and the plot of the finished experiment
    env = {**os.environ, **cluster_env()}
    out = subprocess.run([sys.executable, "-m", "ftrl", "tune", "status", str(tmp_path / "grid")],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert "grid-0" in out.stdout and "grid-1" in out.stdout and "TERMINATED" in out.stdout
    png = tmp_path / "grid.png"
    out = subprocess.run([sys.executable, "-m", "ftrl", "tune", "plot", str(tmp_path / "grid"), "--out", str(png)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a second fit of the same name is refused (a restore continues it)
    with pytest.raises(ftrl.FtrlError, match="restore"):
        ftrl.Tuner(small_ppo(runners=0), run_config=ftrl.RunConfig(name="grid", storage_path=str(tmp_path)),
                   client=client).fit()


def test_pbt_runs_appo_trials_too(make_cluster, tmp_path):
    """Trials of the asynchronous family: an APPO trial clones another in place (its
    learner thread's published weights and queue handled by the driver)."""
    cluster = make_cluster(workers=1, slots=2)
    config = (ftrl.APPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=8, rollout_fragment_length=32)
              .training(train_batch_size=256, minibatch_size=256, num_epochs=1)
              .reporting(min_time_s_per_iteration=0.3).debugging(seed=0))
    results = ftrl.Tuner(
        config, param_space={"lr": tune.grid_search([2e-3, 1e-7])},
        tune_config=ftrl.TuneConfig(scheduler=tune.PopulationBasedTraining(
            perturbation_interval=2, quantile_fraction=0.5, resample_probability=0.0,
            hyperparam_mutations={"lr": [1e-7, 1e-3, 2e-3]})),
        run_config=ftrl.RunConfig(name="appo", storage_path=str(tmp_path), stop={"iteration": 8}, verbose=0),
        client=cluster.client()).fit()
    assert results.status == "FINISHED" and results.num_terminated == 2
    lineage = [json.loads(x) for x in (tmp_path / "appo" / "lineage.jsonl").read_text().splitlines()]
    assert lineage and all(row["latency_s"] < 10 for row in lineage)
    for trial in ("appo-0", "appo-1"):
        assert [r["iteration"] for r in rows(tmp_path / "appo" / trial)] == list(range(1, 9))


def test_pbt_ranks_trials_by_a_custom_metric_path(make_cluster, tmp_path):
    """PBT on `custom_metrics/neg_lr_mean` (the user's callbacks log -lr, the lr each
    trial's runner was built with, per episode), mode max: the ranking prefers the trial
    that does not learn, so the one that learns clones the other at the first
    perturbation, the inverse of ranking by the return (and not left to learning's luck)."""
    cluster = make_cluster(workers=1, slots=2)
    pbt = tune.PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=4, quantile_fraction=0.5,
        hyperparam_mutations={"lr": [1e-7, 1e-3, 2e-3]}, resample_probability=0.0, seed=0)
    results = ftrl.Tuner(
        small_ppo(runners=0, batch=1024).callbacks("ftrl.testing.callbacks:NegativeReturn"),
        param_space={"lr": tune.grid_search([2e-3, 1e-7])},
        tune_config=ftrl.TuneConfig(scheduler=pbt, metric="custom_metrics/neg_lr_mean", mode="max"),
        run_config=ftrl.RunConfig(name="custom", storage_path=str(tmp_path), stop={"iteration": 14}, verbose=0),
        client=cluster.client()).fit()
    assert results.status == "FINISHED" and results.num_terminated == 2
    lineage = [json.loads(line) for line in (tmp_path / "custom" / "lineage.jsonl").read_text().splitlines()]
    assert lineage, "no exploit happened"
    first = lineage[0]
    assert first["target"] == "custom-0" and first["donor"] == "custom-1"  # the learner cloned the other
    for r in results:
        row = rows(Path(r.path))[-1]
        assert r.metrics["custom_metrics/neg_lr_mean"] == row["custom_metrics"]["neg_lr_mean"]
        assert row["custom_metrics"]["neg_return_mean"] == -row["episode_return_mean"]
    # TensorBoard: one run per trial under the experiment's directory, the custom metric's curve in each
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "custom"))
    runs.Reload()
    assert sorted(runs.Runs()) == ["custom-0", "custom-1"]
    for r in results:
        curve = runs.Scalars(r.trial_id, "custom_metrics/neg_return_mean")
        # (TensorBoard keeps float32: equal to the rows' values to float32's precision)
        assert [e.value for e in curve] == pytest.approx(
            [row["custom_metrics"]["neg_return_mean"] for row in rows(Path(r.path))], rel=1e-6)
    best = results.get_best_result()
    assert best.metrics["custom_metrics/neg_lr_mean"] == max(r.metrics["custom_metrics/neg_lr_mean"] for r in results)


def _watch_pids(client, prefix: str, stop: threading.Event, seen: dict[str, set[int]]) -> None:
    while not stop.is_set():
        try:
            for a in client.actors():
                if a["name"].startswith(prefix) and a["state"] == "ALIVE" and a["pid"]:
                    seen.setdefault(a["name"], set()).add(a["pid"])
        except ftrl.FtrlError:
            pass
        stop.wait(0.2)


def test_pbt_clones_the_better_trial_in_place(make_cluster, tmp_path):
    """Two trials, one with a useless learning rate: at each perturbation point the bad
    one clones the good one in place; its runner and driver keep their processes. The
    tuner is SIGKILLed halfway and goes on from experiment.json."""
    cluster = make_cluster(workers=1, slots=2)
    client = cluster.client()
    pbt = tune.PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=4, quantile_fraction=0.5,
        hyperparam_mutations={"lr": [1e-7, 1e-3, 2e-3]}, resample_probability=0.0, seed=0)
    seen: dict[str, set[int]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_pids, args=(client, "inplace", stop, seen), daemon=True)
    watcher.start()
    killed: dict[str, int] = {}

    def kill_the_tuner_once() -> None:
        """SIGKILL the scheduler mid-experiment: its worker restarts it in place."""
        try:
            wait_until(lambda: len(rows(tmp_path / "inplace" / "inplace-1")) >= 8, timeout=120, interval=0.1)
            killed["pid"] = client.actor("inplace/tuner")["pid"]
            os.kill(killed["pid"], signal.SIGKILL)
        except (AssertionError, ftrl.FtrlError, OSError) as e:
            killed["error"] = repr(e)

    killer = threading.Thread(target=kill_the_tuner_once, daemon=True)
    killer.start()
    try:
        results = ftrl.Tuner(
            small_ppo(runners=1, batch=1024),
            param_space={"lr": tune.grid_search([2e-3, 1e-7])},
            tune_config=ftrl.TuneConfig(scheduler=pbt, metric="episode_return_mean", mode="max"),
            run_config=ftrl.RunConfig(name="inplace", storage_path=str(tmp_path), stop={"iteration": 30}),
            client=client,
        ).fit()
    finally:
        stop.set()
        watcher.join(5)
        killer.join(5)
    assert results.status == "FINISHED" and results.num_terminated == 2
    assert "pid" in killed, killed
    assert len(seen["inplace/tuner"]) >= 2  # restarted, in place (one node), from experiment.json
    lineage = [json.loads(line) for line in (tmp_path / "inplace" / "lineage.jsonl").read_text().splitlines()]
    assert lineage, "no exploit happened"
    first = lineage[0]
    assert first["target"] == "inplace-1" and first["donor"] == "inplace-0"
    assert first["old_config"]["lr"] == 1e-7 and first["new_config"]["lr"] != 1e-7
    assert Path(first["donor_checkpoint"]).exists()  # pinned: kept for good
    assert "/pinned/" in first["donor_checkpoint"]
    # exploit in place: every actor of the target kept one process for the whole run
    target_actors = {n: p for n, p in seen.items() if n.startswith("inplace-1/")}
    assert "inplace-1/algorithm" in target_actors and "inplace-1/env_runner/0" in target_actors
    assert all(len(pids) == 1 for pids in target_actors.values()), target_actors
    # the target's rows: its iterations never went back, its weights version jumped
    target_rows = rows(tmp_path / "inplace" / "inplace-1")
    assert [r["iteration"] for r in target_rows] == list(range(1, 31))
    versions = [r["weights_version"] for r in target_rows]
    assert any(b - a > 1 for a, b in itertools.pairwise(versions)), versions
    state = json.loads((tmp_path / "inplace" / "experiment.json").read_text())
    assert state["tuner_incarnation"] > 1
    assert state["counters"]["num_exploits"] == len(lineage) == state["pbt"]["num_exploits"]
    last_clone = [row for row in lineage if row["target"] == "inplace-1"][-1]  # roles may swap later
    assert state["trials"]["inplace-1"]["config"]["lr"] == last_clone["new_config"]["lr"]
    assert state["pbt"]["members"]["inplace-1"]["last_perturbation_time"] > 0


def test_a_lost_worker_pauses_only_its_trials_which_resume_from_checkpoints(make_cluster, tmp_path):
    """4 trials (one env runner each) on 2 workers of 2 slots; the worker holding two
    runners and the tuner is SIGKILLed: the tuner comes back on the other node, the
    other trials go on, the two lost ones go back to the queue (counted as pre-empted)
    and resume from their checkpoints: in the turns of trials at a perturbation point
    (a time-shared population) or once a new worker joins."""
    cluster = make_cluster(workers=2, slots=2)
    client = cluster.client()
    out: dict = {}
    tuner = ftrl.Tuner(
        small_ppo(runners=1, batch=512).checkpointing(checkpoint_interval=2),
        param_space={"lr": tune.grid_search([1e-3, 2e-3, 3e-3, 5e-4])},
        tune_config=ftrl.TuneConfig(scheduler=tune.PopulationBasedTraining(
            perturbation_interval=4, quantile_fraction=0.25, hyperparam_mutations={"lr": [5e-4, 1e-3, 2e-3, 3e-3]})),
        run_config=ftrl.RunConfig(name="lost", storage_path=str(tmp_path), stop={"time_s": 20}),
        client=client)
    runner = threading.Thread(target=lambda: out.setdefault("results", tuner.fit()), daemon=True)
    runner.start()

    def runners_placed() -> dict[str, list[str]]:
        by_node: dict[str, list[str]] = {}
        for a in client.actors():
            if a["name"].startswith("lost-") and "/env_runner/" in a["name"] and a["state"] == "ALIVE":
                by_node.setdefault(a["node_id"], []).append(a["name"].split("/")[0])
        return by_node if sum(map(len, by_node.values())) == 4 else {}

    by_node = wait_until(runners_placed, timeout=90, interval=0.2, what="4 trials running")
    wait_until(lambda: all(len(rows(tmp_path / "lost" / f"lost-{i}")) >= 5 for i in range(4)), timeout=90,
               interval=0.2, what="5 iterations of every trial")
    # the node of the tuner actor (2 of the 4 runners are there too): the scheduler dies
    # with it and is restarted on the other node from experiment.json
    victim = client.actor("lost/tuner")["node_id"]
    lost = set(by_node[victim])
    assert len(lost) == 2, by_node
    survivors = {f"lost-{i}" for i in range(4)} - lost
    before = {t: len(rows(tmp_path / "lost" / t)) for t in survivors}
    os.killpg(cluster.worker_procs[victim].pid, signal.SIGKILL)
    cluster.worker_procs[victim].wait(10)

    def preempted() -> bool:
        state = json.loads((tmp_path / "lost" / "experiment.json").read_text())
        # PENDING, or already RUNNING (or PAUSED again) in a turn a survivor yielded
        return all(state["trials"][t]["num_preemptions"] >= 1 for t in lost)

    wait_until(preempted, timeout=60, interval=0.2, what="the lost trials back in the queue")
    # the survivors are not pre-empted: they keep adding rows (yielding turns at most)
    # (a survivor whose driver was on the lost node restarts it in place first: seconds)
    wait_until(lambda: all(len(rows(tmp_path / "lost" / t)) > before[t] + 2
                           or rows(tmp_path / "lost" / t)[-1]["time_s"] >= 18 for t in survivors),
               timeout=60, interval=0.2, what="the survivors' next rows")
    cluster.start_worker(node_id="replacement", slots=2)
    runner.join(240)
    assert not runner.is_alive(), "the experiment did not finish"
    results = out["results"]
    assert results.status == "FINISHED"
    assert all(r.status == "TERMINATED" and r.metrics["time_s"] >= 20 for r in results)
    state = json.loads((tmp_path / "lost" / "experiment.json").read_text())
    assert state["tuner_incarnation"] > 1
    for t in lost:
        trial = state["trials"][t]
        assert trial["num_preemptions"] >= 1 and trial["num_failures"] == 0
        its_rows = rows(tmp_path / "lost" / t)
        assert its_rows[-1]["time_s"] >= 20
        assert [r["iteration"] for r in its_rows] == list(range(1, len(its_rows) + 1))  # no gap, no repeat
        assert json.loads((tmp_path / "lost" / t / "result.json").read_text())["restored_from"]
    for t in survivors:
        assert state["trials"][t]["num_preemptions"] == 0
    assert state["counters"]["num_trial_failures"] == 0
    lag = state["scheduler"]["max_checkpoint_lag"] or state["scheduler"]["perturbation_interval"]
    for row in (json.loads(x) for x in (tmp_path / "lost" / "lineage.jsonl").read_text().splitlines()
                if x.strip()) if (tmp_path / "lost" / "lineage.jsonl").exists() else []:
        assert row["donor_iteration"] - row["donor_checkpoint_iteration"] <= lag + 1, row


def test_a_drained_worker_is_a_preemption_not_a_failure(make_cluster, tmp_path):
    """SIGTERM (a spot node's notice) on the worker running one trial's env runner: the
    worker drains, the trial goes back to the queue counted as pre-empted (not failed)
    and resumes from its checkpoint on a new worker; the experiment finishes."""
    cluster = make_cluster(workers=2, slots=1, worker_args=["--drain-timeout", "3"])
    client = cluster.client()
    out: dict = {}
    tuner = ftrl.Tuner(small_ppo(runners=1, batch=512).checkpointing(checkpoint_interval=2),
                       param_space={"lr": tune.grid_search([1e-3, 2e-3])},
                       run_config=ftrl.RunConfig(name="drained", storage_path=str(tmp_path), stop={"time_s": 12},
                                                 verbose=0),
                       client=client)
    runner = threading.Thread(target=lambda: out.setdefault("results", tuner.fit()), daemon=True)
    runner.start()

    def runner_nodes() -> dict[str, str]:
        nodes = {a["name"].split("/")[0]: a["node_id"] for a in client.actors()
                 if a["name"].startswith("drained-") and "/env_runner/" in a["name"] and a["state"] == "ALIVE"}
        return nodes if len(nodes) == 2 and all(len(rows(tmp_path / "drained" / t)) >= 3 for t in nodes) else {}

    nodes = wait_until(runner_nodes, timeout=90, interval=0.2, what="2 trials training")
    trial, victim = sorted(nodes.items())[0]
    cluster.worker_procs[victim].send_signal(signal.SIGTERM)

    def preempted() -> bool:
        state = json.loads((tmp_path / "drained" / "experiment.json").read_text())
        return state["trials"][trial]["num_preemptions"] >= 1

    wait_until(preempted, timeout=60, interval=0.2, what="the drained trial pre-empted")
    cluster.start_worker(node_id="replacement", slots=1)
    runner.join(180)
    assert not runner.is_alive(), "the experiment did not finish"
    results = out["results"]
    assert results.status == "FINISHED" and results.num_terminated == 2
    state = json.loads((tmp_path / "drained" / "experiment.json").read_text())
    assert state["trials"][trial]["num_failures"] == 0 and state["counters"]["num_trial_failures"] == 0
    assert json.loads((tmp_path / "drained" / trial / "result.json").read_text())["restored_from"]


EXPERIMENT = """
algo = "PPO"
[environment]
env = "CartPole-v1"
[env_runners]
num_env_runners = 0
num_envs_per_env_runner = 4
[training]
train_batch_size = 256
minibatch_size = 128
num_epochs = 2
[checkpointing]
checkpoint_interval = 3
keep_checkpoints = 2
[debugging]
seed = 0
[tune]
name = "resumed"
num_samples = 1
seed = 1
[tune.stop]
iteration = 70
[tune.param_space]
lr = {grid_search = [1e-3, 1e-6]}
[tune.scheduler]
kind = "pbt"
perturbation_interval = 4
quantile_fraction = 0.5
resample_probability = 0.0
[tune.scheduler.hyperparam_mutations]
lr = [1e-6, 5e-4, 1e-3, 2e-3]
"""


def test_kill_everything_then_resume_with_the_same_lineage(tmp_path):
    """`ftrl tune EXP.toml` on its embedded cluster, SIGKILLed with its coordinator,
    worker and actors mid-experiment; `ftrl tune EXP.toml --resume` carries on from
    experiment.json: the lineage keeps its rows, the trials resume from checkpoints
    (one of them from the checkpoint before its newest, which is corrupted)."""
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    env = {**os.environ, **cluster_env()}
    cmd = [sys.executable, "-m", "ftrl", "tune", str(exp), "--storage-path", str(tmp_path), "--quiet"]
    expdir = tmp_path / "resumed"
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        def progressed() -> bool:
            lineage = expdir / "lineage.jsonl"
            return (lineage.exists() and lineage.read_text().strip() != ""
                    and all(len(rows(expdir / f"resumed-{i}")) >= 12 for i in range(2)))

        wait_until(progressed, timeout=150, interval=0.2, what="an exploit and 12 iterations of each trial")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # every process of the experiment is gone (they die with their parent)
    wait_until(lambda: subprocess.run(["pgrep", "-f", str(expdir / ".ftrl-cluster")],
                                      capture_output=True).returncode != 0, timeout=30, what="all processes gone")
    lineage_before = (expdir / "lineage.jsonl").read_text().splitlines()
    state_before = json.loads((expdir / "experiment.json").read_text())
    assert state_before["status"] == "RUNNING"
    # a corrupt newest checkpoint and a lost driver state: that trial goes back one checkpoint
    ckpts = sorted((expdir / "resumed-0" / "checkpoints").glob("checkpoint_*.ftrl"))
    assert len(ckpts) == 2
    ckpts[-1].write_bytes(ckpts[-1].read_bytes()[:100])
    (expdir / "resumed-0" / "driver_state.ftrl").unlink()
    done = subprocess.run([*cmd, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming" in done.stderr
    state = json.loads((expdir / "experiment.json").read_text())
    assert state["status"] == "FINISHED"
    assert all(t["status"] == "TERMINATED" for t in state["trials"].values())
    lineage_after = (expdir / "lineage.jsonl").read_text().splitlines()
    assert lineage_after[:len(lineage_before)] == lineage_before  # append-only, nothing lost
    assert state["pbt"]["num_perturbations"] >= state_before["pbt"]["num_perturbations"]
    for i in range(2):
        assert rows(expdir / f"resumed-{i}")[-1]["iteration"] == 70
    summary = json.loads((expdir / "resumed-0" / "result.json").read_text())
    assert summary["restored_from"] is not None
