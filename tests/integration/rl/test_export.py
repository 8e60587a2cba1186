"""Load, act, export: `ftrl.Algorithm.from_checkpoint` on the output of a real `ftrl train`
run and of in-process runs (MLP with a mean/std filter, Box actions, the CNN on uint8
pixels, a custom model), `compute_actions` against `compute_single_action`, and the
TorchScript and ONNX files giving ftrl's greedy actions on 1,000 observations in a
process where ftrl cannot be imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ftrl
from ftrl.rl.models.export import random_batch
from tests.cluster import REPO, cluster_env
from tests.trained import train_and_checkpoint

#: run in a fresh process in which `import ftrl` fails: the exported file alone
_RUN_WITHOUT_FTRL = """
import sys
sys.modules["ftrl"] = None  # any import of ftrl now raises ImportError
import numpy as np
path, obs_file, out_file = sys.argv[1:]
obs = np.load(obs_file)
if path.endswith(".onnx"):
    import onnxruntime
    logits, action = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"obs": obs})
else:
    import torch
    with torch.no_grad():
        logits, action = (t.numpy() for t in torch.jit.load(path)(torch.as_tensor(obs)))
np.savez(out_file, logits=logits, action=action)
"""


def _run_exported(path: Path, obs: np.ndarray, tmp: Path) -> tuple[np.ndarray, np.ndarray]:
    np.save(tmp / "obs.npy", obs)
    proc = subprocess.run([sys.executable, "-c", _RUN_WITHOUT_FTRL, str(path), str(tmp / "obs.npy"),
                           str(tmp / "out.npz")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = np.load(tmp / "out.npz")
    return out["logits"], out["action"]


def _parity(algo: ftrl.Algorithm, tmp: Path, n: int = 1000) -> None:
    obs = random_batch(algo.spec, n, seed=3)
    if algo.spec.obs_dtype != "uint8":
        obs = obs * 2.0  # beyond the filter's clip for some
    want = np.asarray(algo.compute_actions(obs))
    single = np.asarray([algo.compute_single_action(o) for o in obs[:20]])
    np.testing.assert_allclose(single, want[:20], rtol=1e-5, atol=1e-6)  # (Box: batch vs one row, last ulp)
    for fmt in ("torchscript", "onnx"):
        path = algo.export_policy(tmp / fmt, format=fmt)
        assert path.exists() and not list(path.parent.glob("*.tmp"))
        logits, action = _run_exported(path, obs.astype(obs.dtype), tmp)
        assert logits.shape[0] == n
        if algo.spec.act_kind == "discrete":
            assert np.array_equal(action, want), fmt
        else:
            np.testing.assert_allclose(action, np.stack(want).reshape(action.shape), rtol=1e-4, atol=1e-5)
            assert (action <= np.asarray(algo.spec.act_high)).all() and (action >= np.asarray(algo.spec.act_low)).all()


def test_a_real_train_runs_output_loads_acts_and_exports(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, **cluster_env()}
    proc = subprocess.run(
        [sys.executable, "-m", "ftrl", "train", "--config", str(REPO / "examples" / "cartpole_ppo.toml"),
         "--output", str(out), "--stop-iters", "4", "--seed", "0", "--quiet", "--num-env-runners", "1",
         "--set", 'observation_filter="MeanStdFilter"'],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    algo = ftrl.Algorithm.from_checkpoint(out)
    try:
        assert type(algo).__name__ == "PPO" and algo.iteration == 4
        assert algo.env_runner_group is None and algo.learner_group is None  # no cluster
        assert algo.filter.kind == "MeanStdFilter" and algo.filter.affine()[0].any()
        result = json.loads((out / "result.json").read_text())
        assert Path(result["checkpoint"]).exists()
        _parity(algo, tmp_path)
    finally:
        algo.stop()
    # the checkpoint file itself loads too, and an IMPALA class refuses a PPO state
    checkpoint = Path(result["checkpoint"])
    again = ftrl.Algorithm.from_checkpoint(checkpoint)
    try:
        assert again.iteration == 4 and again.restored_from == checkpoint
    finally:
        again.stop()
    from ftrl.rl.algorithms.impala import IMPALA

    with pytest.raises(ftrl.ConfigError, match="holds a PPO state"):
        IMPALA.from_checkpoint(checkpoint)


@pytest.mark.parametrize("case", ["box_actions", "cnn", "custom", "appo"])
def test_export_parity_in_process(case, tmp_path):
    config = ftrl.PPOConfig().env_runners(num_envs_per_env_runner=2).training(
        train_batch_size=128, minibatch_size=64, num_epochs=1).debugging(seed=0)
    if case == "appo":  # any algorithm: the asynchronous family's state loads the same way
        config = (ftrl.APPOConfig().environment("CartPole-v1")
                  .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=32)
                  .training(train_batch_size=64, minibatch_size=64, num_epochs=1)
                  .reporting(min_time_s_per_iteration=0.2).debugging(seed=0))
    elif case == "box_actions":
        config.environment("Pendulum-v1").env_runners(observation_filter="MeanStdFilter")
    elif case == "cnn":
        config.environment("ftrl.testing.envs:make_pixel_env")
    else:
        config.environment("CartPole-v1").training(model={"custom_model": "tests.custom_models:TinyNet"})
    train_and_checkpoint(config, tmp_path / "run")
    loaded = ftrl.Algorithm.from_checkpoint(tmp_path / "run")
    try:
        assert loaded.iteration == 1 and type(loaded).__name__ == config.algo_name
        _parity(loaded, tmp_path)
    finally:
        loaded.stop()


@pytest.mark.parametrize("model, fmt", [("NumpyNet", "torchscript"), ("BranchNet", "onnx")])
def test_a_model_that_cannot_be_traced_is_refused_naming_it_and_the_format(model, fmt, tmp_path):
    """NumpyNet goes through numpy (a trace freezes it: the file's self-check sees other
    outputs on a new batch); BranchNet branches on its input's values in Python."""
    path = f"tests.custom_models:{model}"
    config = (ftrl.PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
              .training(model={"custom_model": path}, train_batch_size=64, minibatch_size=64, num_epochs=1))
    algo = config.build()
    try:
        with pytest.raises(ftrl.ConfigError, match=rf"cannot export model {path} as {fmt}"):
            algo.export_policy(tmp_path, format=fmt)
        assert not list(tmp_path.iterdir())  # nothing half-written
        with pytest.raises(ftrl.ConfigError, match="export format 'tflite' is not one of"):
            algo.export_policy(tmp_path, format="tflite")
    finally:
        algo.stop()


def test_no_state_is_a_clear_error(tmp_path):
    with pytest.raises(ftrl.NotFoundError, match="no checkpoint or driver state in"):
        ftrl.Algorithm.from_checkpoint(tmp_path)
    with pytest.raises(ftrl.NotFoundError, match="does not exist"):
        ftrl.Algorithm.from_checkpoint(tmp_path / "nope")
