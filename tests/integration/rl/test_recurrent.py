"""use_lstm on real processes: APPO and PPO learn a task a memoryless policy cannot (repeat the
first observation: an MLP tops out at a quarter of the best return) while a runner is SIGKILLed
every second, and IMPALA with an LSTM on two learners survives one SIGKILLed mid-run
without applying an update twice; a custom recurrent model by import path learns it too."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.cluster import running_train, wait_until
from tests.integration.rl.chaos import sigkill_a_runner_every_second
from tests.integration.rl.test_train_driver import _actors, _iterations
from tests.integration.rl.test_videos import _ftrl

JOB = """
algo = "{algo}"
[environment]
env = "ftrl.testing.memory_envs:RepeatFirstEnv"
env_config = {{episode_len = 5, num_tokens = 4}}
[env_runners]
num_env_runners = 2
num_envs_per_env_runner = 16
rollout_fragment_length = 20
sample_timeout_s = 10.0
[training]
lr = 0.003
train_batch_size = 640
[training.model]
{model}
[reporting]
min_time_s_per_iteration = 0.3
"""
LSTM = "use_lstm = true\nlstm_cell_size = 32\nfcnet_hiddens = [32]"
#: the best return is 4 (the token, one of 4, repeated at steps 1-4); without memory 1
LEARNED = 3.5


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.endswith("}")]


def train(tmp_path: Path, algo: str, job: str, *extra: str, model: str = LSTM):
    config = tmp_path / f"{job}.toml"
    config.write_text(JOB.format(algo=algo, model=model))
    argv = [sys.executable, "-m", "ftrl", "train", "--config", str(config), "--output", str(tmp_path / "run"),
            "--job-name", job, "--seed", "0", "--quiet", *extra]
    return running_train(argv)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", ["APPO", "PPO"])
def test_an_lstm_learns_to_remember_while_a_runner_is_sigkilled_every_second(tmp_path, algo):
    out = tmp_path / "run"
    # both learn this within seconds of their first row: they run a fixed number of iterations
    # instead of stopping at the return, so the runners are SIGKILLed throughout (APPO's last
    # at least min_time_s_per_iteration, 0.3 s; PPO's are a sampling round each, ~0.06 s here)
    stop = ("--stop-iters", "40")
    if algo == "PPO":
        stop = ("--stop-iters", "250", "--set", "minibatch_size=160", "--set", "num_epochs=4", "--set", "lr=0.001")
    with train(tmp_path, algo, "lstm", *stop) as proc:
        wait_until(lambda: (out / "metrics.jsonl").exists(), timeout=120, what="the first row")
        kills = sigkill_a_runner_every_second(proc, "lstm", 150)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stop_iters"
    assert max(r["episode_return_mean"] or 0.0 for r in rows(out)) >= LEARNED, result
    its_rows = rows(out)
    assert [r["iteration"] for r in its_rows] == list(range(1, len(its_rows) + 1))
    assert kills >= 3, kills  # (SIGKILLs that hit a live runner process)
    # ftrl evaluate carries the state through each episode, greedy: it remembers too
    proc = _ftrl("evaluate", str(out), "--episodes", "10", "--seed", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["episode_return_mean"] >= LEARNED


@pytest.mark.timeout(300)
def test_impala_with_an_lstm_on_two_learners_survives_a_learner_sigkill(tmp_path):
    out, job = tmp_path / "run", "lstm2"
    with train(tmp_path, "IMPALA", job, "--num-learners", "2", "--stop-iters", "16") as proc:
        wait_until(lambda: len(_iterations(out)) >= 4, timeout=180, what="four iterations")
        learners = {n: p for n, p in _actors(job).items() if "/learner/" in n}
        os.kill(learners[f"{job}/learner/1"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    its_rows = rows(out)
    assert [r["iteration"] for r in its_rows] == list(range(1, 17))
    # the learner's version after the last update the rows counted (the row's own
    # weights_version is read a moment later: an update that lands in between is counted
    # in the next window, which a run's last row never has)
    counted = next(r["learner"]["weights_version"] for r in reversed(its_rows) if "weights_version" in r["learner"])
    assert counted == sum(r["num_learner_updates_this_iter"] for r in its_rows)
    assert 0 <= its_rows[-1]["weights_version"] - counted <= 1
    assert its_rows[-1]["num_learners"] == 2 and its_rows[-1]["mesh_epoch"] > its_rows[0]["mesh_epoch"]
    assert its_rows[-1]["episode_return_mean"] > 1.5  # past what a memoryless policy can do


@pytest.mark.timeout(300)
def test_a_custom_recurrent_model_by_import_path_learns_to_remember(tmp_path):
    out = tmp_path / "run"
    model = 'custom_model = "tests.custom_models:RecurrentNet"\ncustom_model_config = {hidden = 32}\nmax_seq_len = 5'
    with train(tmp_path, "PPO", "rnn", "--stop-reward", str(LEARNED), "--stop-timesteps", "400000",
               "--set", "minibatch_size=160", "--set", "num_epochs=4", model=model) as proc:
        _, stderr = proc.communicate(timeout=280)
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stop_reward" and result["episode_return_mean"] >= LEARNED, result
    proc = _ftrl("evaluate", str(out), "--episodes", "10", "--seed", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["episode_return_mean"] >= LEARNED  # the state carried through each episode
