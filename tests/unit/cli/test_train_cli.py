"""`ftrl train` argument handling and the in-process run (num_env_runners=0)."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from ftrl.cli.progress import Progress
from ftrl.cli.train import add_train_arguments, run_train
from ftrl.config.jobs import build_job, parse_overrides


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_override_toml_and_set(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('algo = "PPO"\n[environment]\nenv = "Acrobot-v1"\n[training]\nlr = 0.1\n[stop]\nstop_iters = 9\n')
    spec = build_job(_args("--config", str(job), "--env", "CartPole-v1", "--set", "lr=0.5", "--set", "num_epochs=3", "--stop-iters", "2", "--seed", "4"))
    assert spec.config.env == "CartPole-v1"
    assert spec.config.lr == 0.5 and spec.config.num_epochs == 3
    assert spec.config.seed == 4
    assert spec.stop.stop_iters == 2
    assert parse_overrides(["observation_filter=MeanStdFilter", "model={fcnet_hiddens=[8]}"]) == {
        "observation_filter": "MeanStdFilter",
        "model": {"fcnet_hiddens": [8]},
    }


def test_run_train_in_process_then_resume(tmp_path, capsys):
    out = tmp_path / "run"
    common = ("--env", "CartPole-v1", "--output", str(out), "--quiet", "--set", "train_batch_size=64", "--set", "minibatch_size=64", "--set", "num_epochs=1", "--set", "checkpoint_interval=1")
    assert run_train(_args(*common, "--stop-iters", "3")) == 0
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == [1, 2, 3]
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stop_iters"
    # a fresh run refuses a directory that holds checkpoints
    assert run_train(_args(*common, "--stop-iters", "5")) == 2
    assert "--resume" in capsys.readouterr().err
    assert run_train(_args(*common, "--stop-iters", "5", "--resume")) == 0
    lines = [json.loads(x)["iteration"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines == [1, 2, 3, 4, 5]
    # the newest state: the driver state of iteration 3 (a checkpoint of it exists too)
    assert json.loads((out / "result.json").read_text())["restored_from"].endswith("driver_state.ftrl")


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--env", "CartPole-v1", "--set", "lrr=1"), "did you mean 'lr'"),
        (("--env", "NoSuchEnv-v9", "--stop-iters", "1"), "cannot make environment"),
        (("--env", "ftrl.testing.envs:make_text_env", "--stop-iters", "1"), "observation space Text"),
        (("--env", "CartPole-v1", "--set", "ignore_env_runner_failures=true", "--set", "restart_failed_env_runners=true"), "mutually exclusive"),
        (("--env", "CartPole-v1", "--set", 'model={custom_model="tests.custom_models:WrongLogits"}', "--stop-iters", "1"),
         "model custom_model 'tests.custom_models:WrongLogits': forward on a batch of 2 returned shapes"),
        (("--env", "CartPole-v1", "--set", "model={conv_filters=[[16, 3, 1]]}", "--stop-iters", "1"),
         "model conv_filters needs image observations"),
        (("--env", "CartPole-v1", "--set", "callbacks_class=ftrl.testing.callbacks:Nope", "--stop-iters", "1"),
         "callbacks_class 'ftrl.testing.callbacks:Nope' does not import"),
        (("--env", "CartPole-v1", "--set", "callbacks_class=ftrl.testing.envs:InfoEnv", "--stop-iters", "1"),
         "not a subclass of ftrl.Callbacks"),
        (("--env", "CartPole-v1", "--set", "callbacks_class=nodots", "--stop-iters", "1"),
         "callbacks_class must be an import path"),
    ],
)
def test_bad_config_exits_2_with_a_clear_message(tmp_path, capsys, argv, message):
    assert run_train(_args(*argv, "--output", str(tmp_path / "x"), "--quiet")) == 2
    assert message in capsys.readouterr().err


def test_progress_line_and_throttling():
    stream = io.StringIO()
    progress = Progress(stream=stream, interval_s=3600)
    result = {"iteration": 3, "env_steps_sampled": 1234, "episode_return_mean": 50.25, "num_env_runners": 2, "num_healthy_env_runners": 1, "num_env_runner_restarts": 4, "time_s": 2.0}
    progress(result)
    progress(result)  # throttled on a non-terminal
    text = stream.getvalue()
    assert text.count("\n") == 1
    assert "iter     3" in text and "1,234" in text and "50.2" in text and "runners 1/2" in text and "restarts 4" in text
