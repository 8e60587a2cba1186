"""Seed 002's job as its team wrote it, on real processes: an RLlib-style env class
(`__init__(self, config)`), a time limit (their `horizon`: `max_episode_steps`), IMPALA
with TensorFlow's RMSProp and its epsilon, sub-envs in processes of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cluster import cluster_env


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]


def test_an_rllib_style_env_class_with_a_horizon_under_impala_and_tf_rmsprop(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "ftrl", "train", "--algo", "impala", "--env", "ftrl.testing.envs:ContextEnv",
         "--num-env-runners", "2", "--output", str(out), "--stop-iters", "3", "--seed", "0", "--quiet",
         "--set", "max_episode_steps=25", "--set", "remote_worker_envs=true", "--set", "num_envs_per_env_runner=2",
         "--set", "opt_type=rmsprop_tf", "--set", "epsilon=0.1", "--set", "rollout_fragment_length=40",
         "--set", "train_batch_size=160"],
        capture_output=True, text=True, timeout=300, env={**os.environ, **cluster_env()})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(out)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    ended = [r for r in rows if r["episodes_this_iter"] > 0]
    assert ended and all(r["episode_len_mean"] == 25 and r["episode_return_mean"] == 25 for r in ended)
    assert all(r["learner"]["grad_norm"] >= 0 for r in rows if "learner" in r)
