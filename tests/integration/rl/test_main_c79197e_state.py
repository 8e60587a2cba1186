"""State written by c79197e (the main before the rooms restructure of issue 34) still
loads: tests/fixtures/main_c79197e/state.tar.gz, made by its make.sh on that commit.

- a coordinator state dir holding a RUNNING APPO job (an env runner, a learner actor,
  the KL loss on) resumes that job from its driver state, without a rollback;
- that job's newest checkpoint restores into an APPO driver of its own (the target
  network and the adapted KL coefficient included) and trains on;
- a PBT experiment killed mid-run (`ftrl tune`, two trials, exploits in its lineage)
  reads (`ftrl tune status`) and resumes to its stop with its lineage kept."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import ftrl
from ftrl.rl.driver.checkpoint import decode_checkpoint
from tests.cluster import wait_until
from tests.procs import REPO, env

HERE = REPO / "tests" / "fixtures" / "main_c79197e"
ROOT = Path("/tmp/ftrl-main-c79197e")  # the paths inside are absolute


@pytest.fixture
def unpacked():
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    with tarfile.open(HERE / "state.tar.gz") as tar:
        tar.extractall(ROOT, filter="data")
    yield ROOT
    shutil.rmtree(ROOT, ignore_errors=True)


def _iterations(path: Path) -> list[int]:
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines() if line.strip()]


def test_the_coordinator_state_dir_resumes_its_appo_job(make_cluster, tmp_path, unpacked):
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "coordinator").symlink_to(unpacked / "state")
    run_dir = unpacked / "state" / "jobs" / "appo"
    before = _iterations(run_dir / "metrics.jsonl")
    assert before == list(range(1, len(before) + 1)) and len(before) >= 6
    cl = make_cluster(workers=1, slots=4, state_dir=str(tmp_path / "cluster"))
    c = cl.client()
    status = wait_until(lambda: (s := c.job_status("appo"))["iteration"] >= before[-1] + 3
                        and s["stage"] == "RUNNING" and s, 180, what="the APPO job to train on")
    assert status["env_steps_sampled"] > 256 * before[-1]
    alive = {a["name"] for a in c.actors(prefix="appo/") if a["state"] == "ALIVE"}
    assert {"appo/algorithm", "appo/env_runner/0", "appo/learner/0"} <= alive
    after = _iterations(run_dir / "metrics.jsonl")
    assert after[: len(before)] == before and after == list(range(1, len(after) + 1)), "rows lost or repeated"
    assert c.stop("appo", wait=True, timeout=120)["stage"] == "STOPPED"


def test_the_appo_checkpoint_restores_with_its_target_network(tmp_path, unpacked):
    checkpoint = sorted((unpacked / "state" / "jobs" / "appo" / "checkpoints").glob("checkpoint_*.ftrl"))[-1]
    saved = decode_checkpoint(checkpoint.read_bytes())
    (tmp_path / "checkpoints").mkdir()
    shutil.copy(checkpoint, tmp_path / "checkpoints" / checkpoint.name)
    config = (ftrl.APPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=32)
              .training(train_batch_size=256, use_kl_loss=True))
    algo = config.build(output_dir=str(tmp_path), resume=True)
    try:
        assert algo.restored_from == tmp_path / "checkpoints" / checkpoint.name
        assert algo.iteration == int(checkpoint.stem.split("_")[1])
        learner_state = saved["learner"]
        version, _ = algo.get_weights()
        assert version == int(learner_state["version"])
        state = algo.learner.get_state()
        assert np.array_equal(state["target_model"], learner_state["target_model"])
        assert state["kl_coeff"] == learner_state["kl_coeff"]
        result = algo.train()
        assert result["iteration"] == algo.iteration and algo.learner_version > version
    finally:
        algo.stop()


@pytest.mark.timeout(300)
def test_the_pbt_experiment_reads_and_resumes_to_its_stop(unpacked):
    exp = unpacked / "tune" / "pbt"
    lineage_before = (exp / "lineage.jsonl").read_text().splitlines()
    assert lineage_before
    out = subprocess.run([sys.executable, "-m", "ftrl", "tune", "status", str(exp), "--json"],
                         capture_output=True, text=True, env=env(), timeout=60)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary
    iterations_before = {t: _iterations(exp / t / "metrics.jsonl") for t in ("pbt-0", "pbt-1")}
    run = subprocess.run([sys.executable, "-m", "ftrl", "tune", str(HERE / "tune.toml"), "--resume", "--quiet"],
                         capture_output=True, text=True, env=env(), timeout=280)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    experiment = json.loads((exp / "experiment.json").read_text())
    trials = experiment["trials"]
    trials = trials.values() if isinstance(trials, dict) else trials
    assert sorted(t["status"] for t in trials) == ["TERMINATED", "TERMINATED"]
    lineage_after = (exp / "lineage.jsonl").read_text().splitlines()
    assert lineage_after[: len(lineage_before)] == lineage_before
    for trial, before in iterations_before.items():
        after = _iterations(exp / trial / "metrics.jsonl")
        assert after[: len(before)] == before and after == list(range(1, len(after) + 1))
        assert after[-1] >= 60
