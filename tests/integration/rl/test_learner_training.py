"""`ftrl train --num-learners M` end to end: PPO on two learner actors learns CartPole, and
a killed driver re-attaches to its live learners through a fresh mesh epoch."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.cluster import wait_until
from tests.integration.rl.test_train_driver import _actors, _iterations, _train


def _rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_ppo_with_two_learners_reaches_475_on_cartpole(tmp_path):
    out = tmp_path / "run"
    with _train(out, "l2", "--num-env-runners", "0", "--set", "rollout_fragment_length=32",
                "--num-learners", "2", "--stop-reward", "475") as proc:
        _, stderr = proc.communicate(timeout=360)
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stop_reward" and result["episode_return_mean"] >= 475
    rows = _rows(out)
    assert all(r["num_learners"] == 2 and r["mesh_epoch"] >= 1 for r in rows)
    assert [r["weights_version"] for r in rows] == list(range(1, len(rows) + 1))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("during_reformation", [False, True], ids=["steady", "during-reformation"])
def test_killed_driver_reattaches_to_its_learners_in_a_new_epoch(tmp_path, during_reformation):
    """The driver is SIGKILLed (in the second case right after a learner, while the mesh
    re-forms around the survivor): its restarted copy re-attaches to the live learners,
    the restarted learner rejoins, and the run ends with every iteration exactly once."""
    out, job = tmp_path / "run", "kl"
    with _train(out, job, "--num-learners", "2", "--stop-iters", "40") as proc:
        wait_until(lambda: len(list((out / "checkpoints").glob("checkpoint_*.ftrl"))) >= 2, timeout=180,
                   what="two checkpoints")
        before = _actors(job)
        assert {f"{job}/learner/0", f"{job}/learner/1", f"{job}/algorithm"} <= set(before)
        if during_reformation:
            os.kill(before[f"{job}/learner/1"], signal.SIGKILL)
            time.sleep(0.2)
        os.kill(before[f"{job}/algorithm"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    assert "driver restarted" in stderr
    assert _iterations(out) == list(range(1, 41))
    rows = _rows(out)
    epochs = [r["mesh_epoch"] for r in rows]
    assert epochs == sorted(epochs) and epochs[-1] > epochs[0]  # the new driver opened a new epoch
    assert rows[-1]["num_learners"] == 2
    if during_reformation:  # the death's epoch (survivor alone) was spent, never re-entered
        assert epochs[-1] >= epochs[0] + 2, epochs
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stop_iters"
    wait_until(lambda: not _actors(job), timeout=30, what="the job's processes to end")
