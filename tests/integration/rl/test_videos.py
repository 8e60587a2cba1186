"""Watching the agent, with real processes: `ftrl evaluate` on a run's directory (MP4s of
episode length + 1 frames, return statistics, clear errors), videos while training from
one evaluation runner of two, and `ftrl plot`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ftrl.rl.video import count_frames
from tests.cluster import REPO, cluster_env

CARTPOLE_JOB = REPO / "examples" / "cartpole_ppo.toml"


def _ftrl(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **cluster_env()}
    return subprocess.run([sys.executable, "-m", "ftrl", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]


def test_training_videos_come_from_one_evaluation_runner_and_evaluate_replays_the_run(tmp_path):
    out = tmp_path / "run"
    proc = _ftrl("train", "--config", str(CARTPOLE_JOB), "--output", str(out), "--stop-iters", "6", "--seed", "0",
                 "--quiet", "--num-env-runners", "1", "--set", "evaluation_interval=2",
                 "--set", "evaluation_num_env_runners=2", "--set", "evaluation_duration=4",
                 "--set", "evaluation_video_interval=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(out)
    evaluated = [r for r in rows if "evaluation" in r]
    assert [r["iteration"] for r in evaluated] == [2, 4, 6]
    assert all(r["evaluation"]["num_healthy_eval_runners"] == 2 for r in evaluated)
    videos = sorted((out / "videos").glob("*.mp4"))
    # one video per evaluation (one runner of the two records), named by the episode count
    assert [out / r["evaluation"]["video"] for r in evaluated] == videos
    for r in evaluated:
        ev = r["evaluation"]
        assert f"episode_{r['episodes_total']:09d}.mp4" in ev["video"]
        assert count_frames(out / ev["video"]) == ev["video_episode_len"] + 1

    # ftrl evaluate: the newest state, greedy, with a video of each episode
    video_dir = tmp_path / "watch"
    proc = _ftrl("evaluate", str(out), "--episodes", "2", "--video", str(video_dir), "--seed", "3", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["episodes"] == 2 and result["iteration"] == 6 and len(result["lengths"]) == 2
    assert result["episode_return_mean"] == sum(result["returns"]) / 2  # CartPole: 1 per step
    assert result["returns"] == [float(n) for n in result["lengths"]]
    assert [Path(v).name for v in result["videos"]] == ["episode_0000.mp4", "episode_0001.mp4"]
    assert [count_frames(v) for v in result["videos"]] == [n + 1 for n in result["lengths"]]
    text = _ftrl("evaluate", str(out), "--episodes", "1", "--seed", "3")
    assert text.returncode == 0 and "1 episodes of CartPole-v1 (iteration 6" in text.stdout
    assert f"return mean {result['returns'][0]:.2f}" in text.stdout  # the same seed, the same episode

    # ftrl plot: the run's curves
    proc = _ftrl("plot", str(out), "--out", str(tmp_path / "run.png"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_refuses_what_it_cannot_do_with_exit_2(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _ftrl("evaluate", str(empty))
    assert proc.returncode == 2 and "no checkpoint or driver state" in proc.stderr
    assert "driver_state.ftrl" in proc.stderr and "checkpoint_*.ftrl" in proc.stderr
    # an env with no rgb_array rendering: refused before the first episode
    out = tmp_path / "counter"
    proc = _ftrl("train", "--env", "ftrl.testing.envs:make_counter_env", "--output", str(out), "--stop-iters", "1",
                 "--quiet", "--set", "train_batch_size=64", "--set", "minibatch_size=64")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _ftrl("evaluate", str(out), "--video", str(tmp_path / "v"))
    assert proc.returncode == 2, proc.stderr
    assert "does not render RGB frames" in proc.stderr and "episode 1/" not in proc.stdout
    assert not (tmp_path / "v").exists() or not list((tmp_path / "v").iterdir())
    proc = _ftrl("plot", str(empty))
    assert proc.returncode == 2 and "no metrics.jsonl" in proc.stderr
