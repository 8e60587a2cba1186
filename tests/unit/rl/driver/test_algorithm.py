"""Algorithm driver: train(), metrics.jsonl, checkpoints, resume, evaluation, custom
training_iteration, remote runners through injected handles, stop and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest

from ftrl.config import PPOConfig, StopCriteria
from ftrl.rl.algorithms.ppo import PPO
from ftrl.rl.driver.checkpoint import decode_checkpoint
from ftrl.wire.errors import ConfigError
from tests.local_client import LocalClient


def _config(n: int = 0, **env_runners) -> PPOConfig:
    env_runners = {"num_envs_per_env_runner": 4, "rollout_fragment_length": 16, **env_runners}
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=n, **env_runners)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=2)
        .checkpointing(checkpoint_interval=2, keep_checkpoints=5)
        .debugging(seed=0)
    )


REQUIRED = (
    "iteration",
    "env_steps_sampled",
    "episode_return_mean",
    "num_healthy_env_runners",
    "num_env_runner_restarts",
    "time_s",
)


def test_train_writes_metrics_and_checkpoints(tmp_path):
    algo = _config().build(output_dir=tmp_path)
    results = [algo.train() for _ in range(3)]
    assert [r["iteration"] for r in results] == [1, 2, 3]
    assert results[-1]["env_steps_sampled"] == 3 * 64
    assert results[-1]["learner"]["weights_version"] == 3
    assert algo.flush_state()  # rows go to disk off the training path, after their state
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == [1, 2, 3]
    state = decode_checkpoint((tmp_path / "driver_state.ftrl").read_bytes())
    assert (state["iteration"], state["learner_version"], state["row"]["iteration"]) == (3, 3, 3)
    assert "learner" not in state  # the learner's tensors go beside it
    assert decode_checkpoint((tmp_path / "learner_state.ftrl").read_bytes())["version"] == 3
    for key in REQUIRED:
        assert key in lines[-1], key
    assert [p.name for p in sorted((tmp_path / "checkpoints").iterdir())] == ["checkpoint_00000002.ftrl"]
    assert algo.compute_single_action(np.zeros(4, np.float32)) in (0, 1)
    algo.stop()


def test_resume_continues_from_the_driver_state_of_the_last_iteration(tmp_path):
    cfg = _config(observation_filter="MeanStdFilter")
    algo = cfg.build(output_dir=tmp_path)
    for _ in range(5):  # checkpoints at 2 and 4; iteration 5 has only its driver state
        algo.train()
    algo.stop()
    state5 = decode_checkpoint((tmp_path / "driver_state.ftrl").read_bytes())
    assert state5["iteration"] == 5
    learner5 = decode_checkpoint((tmp_path / "learner_state.ftrl").read_bytes())
    resumed = cfg.build(output_dir=tmp_path, resume=True)
    assert resumed.restored_from == tmp_path / "driver_state.ftrl"
    assert (resumed.iteration, resumed.env_steps_sampled) == (5, 5 * 64)
    assert resumed.filter.stats.n == state5["filter"]["stats"]["n"] > 0
    for key, value in learner5["model"].items():
        np.testing.assert_array_equal(resumed.learner.model.state_dict()[key].numpy(), value)
    assert resumed.learner.version == 5
    assert resumed.episodes.episodes_total == state5["episodes"]["episodes_total"]
    result = resumed.train()
    assert result["iteration"] == 6 and result["env_steps_sampled"] == 6 * 64
    assert result["time_s"] >= state5["time_s"]
    resumed.stop()
    lines = [json.loads(x)["iteration"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [1, 2, 3, 4, 5, 6]  # nothing removed, nothing repeated


def test_a_state_whose_row_was_not_written_yet_gets_its_row(tmp_path):
    """The writer's order is state, then row: a driver that died in between left the
    newest state without its row; the resumed run writes it, then goes on."""
    cfg = _config()
    algo = cfg.build(output_dir=tmp_path)
    for _ in range(3):
        algo.train()
    algo.stop()
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:2]))
    resumed = cfg.build(output_dir=tmp_path, resume=True)
    assert resumed.iteration == 3
    resumed.train()
    resumed.stop()
    assert [json.loads(x)["iteration"] for x in path.read_text().splitlines()] == [1, 2, 3, 4]


def test_lost_driver_state_continues_the_counters_from_the_newest_row(tmp_path, caplog):
    """driver_state.ftrl gone (or corrupt): the learner state of the newest row's version
    (learner_state.ftrl) and that row's counters; the iterations never go back."""
    cfg = _config()
    algo = cfg.build(output_dir=tmp_path)
    for _ in range(5):
        algo.train()
    algo.stop()
    (tmp_path / "driver_state.ftrl").write_bytes(b"torn")
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 6, "env_st')  # a row torn by a crash
    resumed = cfg.build(output_dir=tmp_path, resume=True)
    assert "ignoring" in caplog.text and "driver_state.ftrl" in caplog.text
    assert resumed.restored_from.name == "checkpoint_00000004.ftrl"
    assert (resumed.iteration, resumed.env_steps_sampled) == (5, 5 * 64)
    assert resumed.learner.version == 5  # learner_state.ftrl has the row's version
    assert resumed.train()["iteration"] == 6
    resumed.stop()
    lines = [json.loads(x)["iteration"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [1, 2, 3, 4, 5, 6]


def test_resume_skips_a_corrupt_newest_checkpoint(tmp_path, caplog):
    cfg = _config()
    algo = cfg.build(output_dir=tmp_path)
    for _ in range(4):
        algo.train()
    algo.stop()
    newest = tmp_path / "checkpoints" / "checkpoint_00000004.ftrl"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x55
    newest.write_bytes(bytes(data))
    (tmp_path / "driver_state.ftrl").unlink()
    (tmp_path / "learner_state.ftrl").unlink()
    resumed = cfg.build(output_dir=tmp_path, resume=True)
    assert "skipping corrupt checkpoint" in caplog.text
    assert resumed.restored_from.name == "checkpoint_00000002.ftrl"
    assert resumed.learner.version == 2  # the only learner state left
    assert resumed.iteration == 4  # the rows' counters: iterations never go back
    resumed.stop()


def test_resume_refuses_what_it_cannot_restore(tmp_path):
    algo = _config().build(output_dir=tmp_path)
    algo.train()
    algo.train()
    algo.stop()
    with pytest.raises(ConfigError, match="env="):
        _config().environment("Acrobot-v1").build(output_dir=tmp_path, resume=True)
    with pytest.raises(ConfigError, match="model"):
        _config().training(model={"fcnet_hiddens": [32]}).build(output_dir=tmp_path, resume=True)
    # a learning-rate change is fine
    _config().training(lr=1e-4).build(output_dir=tmp_path, resume=True).stop()


def test_custom_training_iteration_uses_the_helpers():
    class SampleOnly(PPO):
        def training_iteration(self):
            fragments = self.synchronous_parallel_sample(max_env_steps=128)
            self.sync_weights()
            return {"fragments": len(fragments), "steps": sum(f["rewards"].size for f in fragments)}

    algo = SampleOnly(_config())
    result = algo.train()
    assert result["fragments"] == 2 and result["steps"] == 128
    assert result["env_steps_sampled"] == 128
    assert algo.learner.version == 0  # nothing learned
    algo.stop()


def test_evaluation_on_a_local_runner():
    algo = _config().evaluation(evaluation_interval=2, evaluation_duration=3).build()
    assert "evaluation" not in algo.train()
    ev = algo.train()["evaluation"]
    assert ev["num_episodes"] == 3 and ev["episode_return_mean"] > 0
    algo.stop()


def test_remote_runners_survive_crashes_through_handles(tmp_path):
    cfg = _config(n=2, rollout_fragment_length=8).evaluation(
        evaluation_interval=3, evaluation_num_env_runners=1, evaluation_duration=2
    )
    with LocalClient() as client:
        algo = cfg.build(client=client, output_dir=tmp_path, job_name="job")
        names = {a["name"] for a in client.actors()}
        assert names == {"job/env_runner/0", "job/env_runner/1", "job/eval_runner/0"}
        results = []
        for i in range(8):
            if i in (1, 3, 5):
                client.crash_actor(f"job/env_runner/{i % 2}")
            results.append(algo.train())
        result = results[-1]
        assert result["iteration"] == 8
        assert result["num_env_runner_restarts"] >= 2
        assert result["num_env_runner_failures"] >= 3
        assert results[5]["evaluation"]["num_episodes"] == 2
        assert "evaluation" not in results[6]
        assert result["env_steps_sampled"] >= 8 * 32
        algo.stop()
        assert {a["state"] for a in client.actors()} == {"DEAD"}
    with LocalClient() as client:  # failure counters continue across a resume
        resumed = cfg.build(client=client, output_dir=tmp_path, resume=True, job_name="job")
        after = resumed.train()
        assert after["iteration"] == 9
        assert after["num_env_runner_restarts"] >= result["num_env_runner_restarts"]
        assert after["num_env_runner_failures"] >= result["num_env_runner_failures"]
        resumed.stop()


def test_run_stops_on_criteria_and_on_ctrl_c(tmp_path):
    algo = _config().build(output_dir=tmp_path)
    summary = algo.run(StopCriteria(stop_iters=3))
    assert summary["stop_reason"] == "stop_iters" and summary["iteration"] == 3
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["iteration"] == 3 and saved["checkpoint"].endswith("checkpoint_00000003.ftrl")

    # first Ctrl-C: the iteration in progress finishes, then a final checkpoint
    def ctrl_c_once(result):
        if result["iteration"] == 4:
            os.kill(os.getpid(), signal.SIGINT)

    summary = algo.run(StopCriteria(stop_iters=10), on_result=ctrl_c_once)
    assert summary["stop_reason"] == "stopped" and summary["iteration"] == 4
    assert summary["checkpoint"].endswith("checkpoint_00000004.ftrl")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored

    # an abort (second Ctrl-C) mid-iteration writes no checkpoint of a half-done iteration
    calls = {"n": 0}
    original = algo.training_iteration

    def aborted():
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original()

    algo.training_iteration = aborted
    summary = algo.run(StopCriteria(stop_iters=10))
    assert summary["stop_reason"] == "interrupted" and summary["iteration"] == 5
    assert not (tmp_path / "checkpoints" / "checkpoint_00000005.ftrl").exists()
    assert summary["checkpoint"].endswith("checkpoint_00000004.ftrl")
    assert json.loads((tmp_path / "result.json").read_text())["stop_reason"] == "interrupted"
    algo.stop()


def test_driver_runs_a_job_in_the_background_and_stops_on_request(tmp_path):
    from ftrl.rl.driver.actor import AlgorithmDriver

    job = {
        "environment": {"env": "CartPole-v1"},
        "env_runners": {"num_envs_per_env_runner": 2, "rollout_fragment_length": 16},
        "training": {"train_batch_size": 32, "minibatch_size": 32, "num_epochs": 1},
        "stop": {"stop_iters": 3},
    }
    driver = AlgorithmDriver(job, str(tmp_path / "a"))
    status = driver.wait(60)
    assert status["stage"] == "FINISHED" and status["iteration"] == 3
    assert status["summary"]["stop_reason"] == "stop_iters"

    job["stop"] = {"stop_iters": 100_000}
    driver = AlgorithmDriver(job, str(tmp_path / "b"))
    deadline = time.monotonic() + 30
    while (driver.status().get("iteration") or 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    status = driver.stop()
    status = driver.wait(60)
    assert status["stage"] == "STOPPED" and status["summary"]["stop_reason"] == "stopped"
    assert (tmp_path / "b" / "result.json").exists()

    with pytest.raises(ConfigError, match="did you mean 'lr'"):
        AlgorithmDriver({"environment": {"env": "CartPole-v1"}, "lrr": 1}, str(tmp_path / "c"))


def test_scaling_learners_that_share_a_gpu_beyond_one_is_refused():
    from ftrl.rl.driver.learner_access import scale_learner_group

    class Group:  # what scale_learner_group calls of a learner group
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def scale(self, n: int) -> None:
            self.sizes.append(n)

    cfg = PPOConfig().environment("CartPole-v1").learners(num_learners=1, num_gpus_per_learner=0.5)
    group = Group()
    with pytest.raises(ConfigError, match="cannot form an NCCL group"):
        scale_learner_group(cfg, group, 2)
    scale_learner_group(cfg, group, 1)
    cfg.learners(num_gpus_per_learner=1)
    scale_learner_group(cfg, group, 3)
    assert group.sizes == [1, 3]
    with pytest.raises(ConfigError, match="no learner group"):
        scale_learner_group(cfg, None, 2)
