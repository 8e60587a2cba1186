"""An LSTM policy through the lifecycle of a job on real processes: population-based
training's exploit in place (the target's driver, runners and learner stay; the donor's
LSTM weights arrive), a driver SIGKILLed mid-run (it resumes from the newest state, no
iteration redone, and goes on learning a task that needs memory), and the deterministic
mode (two runs bit for bit alike)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from ftrl.config import APPOConfig
from tests.cluster import wait_until
from tests.integration.rl.test_appo import DETERMINISTIC_KEYS, _deterministic_run
from tests.integration.rl.test_driver_failover import RowWatch, _rows
from tests.integration.rl.test_exploit_in_place import _exploit_in_place

REPEAT = "ftrl.testing.memory_envs:RepeatFirstEnv"
LSTM = {"use_lstm": True, "lstm_cell_size": 16, "fcnet_hiddens": [16], "lstm_use_prev_action": True}
APPO_LSTM = {"algo": "appo", "env": REPEAT, "env_config": {"episode_len": 5, "num_tokens": 4}, "model": LSTM,
             "num_env_runners": 1, "num_envs_per_env_runner": 8, "rollout_fragment_length": 20,
             "train_batch_size": 160, "lr": 0.003, "checkpoint_interval": 0, "min_time_s_per_iteration": 0.3,
             "stop": {"stop_iters": 100_000}}


@pytest.mark.timeout(180)
def test_an_lstm_policy_is_exploited_in_place_onto_a_learner_actor(client, tmp_path):
    info, _ = _exploit_in_place(client, tmp_path, APPO_LSTM, {**APPO_LSTM, "num_learners": 1}, "lx")
    assert info["weights_version"] > info["previous_weights_version"]


@pytest.mark.timeout(240)
def test_a_driver_sigkilled_mid_run_resumes_an_lstm_job_without_redoing_an_iteration(client, tmp_path):
    out = tmp_path / "job"
    client.submit({**APPO_LSTM, "num_env_runners": 2, "checkpoint_interval": 3, "seed": 0}, job_id="lr",
                  output_dir=str(out))
    watch = RowWatch(out / "metrics.jsonl")
    try:
        wait_until(lambda: len(watch.seen) >= 6, 120, what="six iterations")
        driver = client.actor("lr/algorithm")
        before = len(watch.seen)
        os.kill(driver["pid"], signal.SIGKILL)
        wait_until(lambda: (a := client.actor("lr/algorithm"))["state"] == "ALIVE"
                   and a["incarnation"] != driver["incarnation"], 120, what="the driver restarted")
        wait_until(lambda: len(watch.seen) >= before + 8, 180, what="eight iterations after the SIGKILL")
        status = client.stop("lr", wait=True, timeout=120)
    finally:
        iterations = watch.close()
    assert status["stage"] == "STOPPED", status
    assert not watch.violations, watch.violations
    assert iterations == list(range(1, len(iterations) + 1))
    rows = _rows(out)
    versions = [r["weights_version"] for r in rows]
    assert versions == sorted(versions)  # the learner went on from its saved state, never back
    steps = [r["env_steps_sampled"] for r in rows]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert rows[-1]["episode_return_mean"] > 1.2  # past the memoryless policy's 1 (the best is 4)


LSTM_DETERMINISTIC = (APPOConfig().environment(REPEAT, env_config={"episode_len": 5})
                      .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=20)
                      .training(deterministic=True, train_batch_size=160, lr=3e-3, model=LSTM)
                      .debugging(seed=5))


@pytest.mark.timeout(240)
def test_deterministic_mode_reproduces_an_lstm_run_bit_for_bit(make_cluster):
    first, weights_a = _deterministic_run(make_cluster, "ldet-a", LSTM_DETERMINISTIC.copy(), 6)
    second, weights_b = _deterministic_run(make_cluster, "ldet-b", LSTM_DETERMINISTIC.copy(), 6)
    for a, b in zip(first, second, strict=True):
        assert {k: a[k] for k in DETERMINISTIC_KEYS} == {k: b[k] for k in DETERMINISTIC_KEYS}
    assert np.array_equal(weights_a, weights_b)
    assert first[-1]["weights_version"] == 6
