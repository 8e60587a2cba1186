"""A coordinator state dir and a checkpoint written before the rl/ restructure
(tests/fixtures/legacy_36f3c3f, made by its make.sh on 36f3c3f) still load: the job's
records name the old class paths (ftrl.rl.driver:AlgorithmDriver, ftrl.rl.env_runner:
EnvRunner, ftrl.rl.learner_actor:LearnerActor with ftrl.rl.learner:PPOLearner), and the
restarted job goes on from its saved state without a rollback."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import ftrl
from tests.cluster import wait_until
from tests.procs import REPO

FIXTURE = REPO / "tests" / "fixtures" / "legacy_36f3c3f" / "state.tar.gz"
ROOT = Path("/tmp/ftrl-legacy-36f3c3f")  # the paths inside the records are absolute


def _unpack() -> Path:
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(ROOT, filter="data")
    return ROOT / "state"


def _iterations(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["iteration"] for line in lines if line.strip()]


def test_a_state_dir_of_the_old_layout_resumes_its_job(make_cluster, tmp_path):
    state = _unpack()
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "coordinator").symlink_to(state)  # LocalCluster's coordinator dir
    run_dir = state / "jobs" / "legacy"
    before = _iterations(run_dir)
    assert before == list(range(1, len(before) + 1)) and len(before) >= 5
    try:
        cl = make_cluster(workers=1, slots=4, state_dir=str(tmp_path / "cluster"))
        c = cl.client()
        status = wait_until(lambda: (s := c.job_status("legacy"))["iteration"] >= before[-1] + 3
                            and s["stage"] == "RUNNING" and s, 180, what="the legacy job to train on")
        assert status["env_steps_sampled"] > 256 * before[-1]
        actors = {a["name"]: a for a in c.actors(prefix="legacy/") if a["state"] == "ALIVE"}
        assert {"legacy/algorithm", "legacy/env_runner/0", "legacy/learner/0"} <= set(actors)
        after = _iterations(run_dir)
        assert after == list(range(1, len(after) + 1)), "rows lost or repeated"
        assert c.stop("legacy", wait=True, timeout=120)["stage"] == "STOPPED"
    finally:
        shutil.rmtree(ROOT, ignore_errors=True)


def test_a_checkpoint_of_the_old_layout_restores(tmp_path):
    state = _unpack()
    checkpoint = sorted((state / "jobs" / "legacy" / "checkpoints").glob("checkpoint_*.ftrl"))[-1]
    (tmp_path / "checkpoints").mkdir()
    shutil.copy(checkpoint, tmp_path / "checkpoints" / checkpoint.name)
    shutil.rmtree(ROOT, ignore_errors=True)
    config = (ftrl.PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
              .training(train_batch_size=256, minibatch_size=128, num_epochs=2))
    algo = config.build(output_dir=str(tmp_path), resume=True)
    try:
        assert algo.restored_from == tmp_path / "checkpoints" / checkpoint.name
        assert algo.iteration == int(checkpoint.stem.split("_")[1])
        version = algo.learner_version
        assert version >= algo.iteration
        result = algo.train()
        assert result["iteration"] == algo.iteration and algo.learner_version == version + 1
    finally:
        algo.stop()
