"""User callbacks on real processes: a custom metric from the env's info reaches the rows
of a 2-runner cluster job while a runner is SIGKILLed (the restarted runner's episodes
are counted, none twice: the custom values keep lining up with the return window's
episodes), and `ftrl status JOB` shows it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import cluster_env, wait_until


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_a_custom_metric_from_info_survives_a_killed_runner(make_cluster, tmp_path):
    cluster = make_cluster(workers=1, slots=4)
    client = cluster.client()
    out, log = tmp_path / "run", tmp_path / "episodes.log"
    job = {
        "algo": "PPO",
        "environment": {"env": "ftrl.testing.envs:make_info_env",
                        "env_config": {"episode_log": str(log), "max_episode_steps": 100}},
        "env_runners": {"num_env_runners": 2, "num_envs_per_env_runner": 2},
        "training": {"train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1},
        "callbacks": {"callbacks_class": "ftrl.testing.callbacks:PoleAngle"},
        "checkpointing": {"checkpoint_interval": 5},
        "debugging": {"seed": 0},
        "stop": {"stop_iters": 1_000_000},
    }
    job_id = client.submit(job, job_id="cbk", output_dir=str(out))
    try:
        wait_until(lambda: len(_rows(out)) >= 5, timeout=120, what="five rows")
        runner = next(a for a in client.actors() if a["name"] == "cbk/env_runner/1")
        os.kill(runner["pid"], signal.SIGKILL)
        wait_until(lambda: any(a["name"] == "cbk/env_runner/1" and a["state"] == "ALIVE" and a["pid"] != runner["pid"]
                               for a in client.actors()), timeout=60, what="the runner to come back")
        new_pid = next(a["pid"] for a in client.actors() if a["name"] == "cbk/env_runner/1")
        killed_at = len(_rows(out))
        # the restarted runner's episodes reach the rows: its pid among the window's values
        wait_until(lambda: any(r["custom_metrics"].get("pid_max") == new_pid or
                               r["custom_metrics"].get("pid_min") == new_pid for r in _rows(out)[killed_at:]),
                   timeout=120, what="an episode of the restarted runner in a row")
        env = {**os.environ, **cluster_env()}
        status = subprocess.run([sys.executable, "-m", "ftrl", "status", "--coordinator", cluster.address,
                                 "--token-file", str(cluster.token_file), "cbk"],
                                capture_output=True, text=True, timeout=60, env=env)
        assert status.returncode == 0, status.stderr
        assert "custom pole_angle_max_mean" in status.stdout and "custom steps_mean" in status.stdout
        record = client.job_status(job_id)
        assert "pole_angle_max_mean" in record["metrics"]["custom_metrics"]
    finally:
        client.stop(job_id)
        wait_until(lambda: client.job_status(job_id)["stage"] in ("STOPPED", "FINISHED"), timeout=60,
                   what="the job to stop")
    rows = _rows(out)
    assert rows[-1]["num_env_runner_restarts"] >= 1 and rows[-1]["num_callback_errors"] == 0
    with_episodes = [r for r in rows if r["episode_len_mean"] is not None]
    assert len(with_episodes) >= 10
    for r in with_episodes:
        custom = r["custom_metrics"]
        # each episode in the window has its own values: the same episodes as the return's
        assert abs(custom["steps_mean"] - r["episode_len_mean"]) < 1e-9, r
        assert 0 < custom["pole_angle_max_mean"] < 0.5
    # every episode counted was one a runner finished (and logged) once; those of the
    # killed runner's last fragment were never delivered
    logged = [tuple(line.split()[:2]) for line in log.read_text().splitlines()]
    assert len(logged) == len(set(logged))
    assert rows[-1]["episodes_total"] <= len(logged)
    pids = {int(p) for p, _ in logged}
    assert runner["pid"] in pids and new_pid in pids
    # `ftrl plot` marks the runner's restart where the rows counted it
    from ftrl.rl.driver.run_plot import events

    restarts = events(rows, "num_env_runner_restarts")
    assert len(restarts) >= 1 and restarts[0] in [r["env_steps_sampled"] for r in rows]
    env = {**os.environ, **cluster_env()}
    plot = subprocess.run([sys.executable, "-m", "ftrl", "plot", str(out)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert plot.returncode == 0, plot.stderr
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tensorboard_curves_and_a_wandb_logger_hook_of_a_real_train_run(tmp_path):
    """`ftrl train` (embedded cluster, real processes) with the W&B logger example and
    evaluation: TensorBoard's own reader finds every row's curves, custom and evaluation
    metrics included; the W&B hook left an offline run holding the rows."""
    pytest.importorskip("wandb")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.cluster import REPO

    out = tmp_path / "run"
    env = {**os.environ, **cluster_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "ftrl", "train", "--config", str(REPO / "examples" / "cartpole_ppo.toml"),
         "--output", str(out), "--stop-iters", "6", "--seed", "0", "--quiet",
         "--set", "callbacks_class=examples.wandb_logger:WandbLogger",
         "--set", "evaluation_interval=3", "--set", "evaluation_duration=2"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(out)
    assert [r["iteration"] for r in rows] == list(range(1, 7))
    events = EventAccumulator(str(out))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"episode_return_mean", "learner/policy_loss", "evaluation/episode_return_mean", "iteration"} <= tags
    curve = events.Scalars("episode_return_mean")
    assert [e.step for e in curve] == [r["env_steps_sampled"] for r in rows]
    # (TensorBoard keeps float32: equal to the rows' values to float32's precision)
    assert [e.value for e in curve] == pytest.approx([r["episode_return_mean"] for r in rows], rel=1e-6)
    assert [e.value for e in events.Scalars("evaluation/episode_return_mean")] == pytest.approx(
        [r["evaluation"]["episode_return_mean"] for r in rows if "evaluation" in r], rel=1e-6)
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0
    assert b"episode_return_mean" in runs[0].read_bytes()


def test_a_raising_callback_in_a_remote_runner_and_the_driver_stops_nothing(tmp_path):
    """DESIGN's "a user callback raises" on real processes: `ftrl train` with a runner actor
    whose `on_episode_end` raises for every other episode and a driver whose
    `on_train_result` raises every iteration. The run trains to its stop; the rows count the
    errors; the raising episodes' values are dropped, the others kept."""
    out = tmp_path / "run"
    env = {**os.environ, **cluster_env()}
    proc = subprocess.run(
        [sys.executable, "-m", "ftrl", "train", "--env", "CartPole-v1", "--num-env-runners", "1",
         "--output", str(out), "--stop-iters", "4", "--seed", "0", "--quiet",
         "--set", "callbacks_class=ftrl.testing.callbacks:Raising",
         "--set", "train_batch_size=512", "--set", "minibatch_size=256"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(out)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    errors = [r["num_callback_errors"] for r in rows]
    # each iteration: the driver's on_train_result, and about half the episodes of the runner
    assert errors == sorted(errors) and errors[-1] > 4 + rows[-1]["episodes_total"] // 4
    assert all(r["custom_metrics"]["kept_mean"] == 1.0 for r in rows)
    assert json.loads((out / "result.json").read_text())["stop_reason"] == "stop_iters"
