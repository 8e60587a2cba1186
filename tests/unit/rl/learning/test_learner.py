"""PPO learner: updates, versions, invalid rows, state round-trip through the codec."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ftrl.config import PPOConfig
from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.wire import codec


def _setup(seed: int = 0, **training):
    cfg = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=32)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=2, **training)
        .debugging(seed=seed)
    )
    runner = EnvRunner(cfg, set_torch_threads=False)
    learner = PPOLearner(cfg, runner.spec)
    runner.set_weights(*learner.get_weights())
    return runner, learner


def test_update_changes_weights_and_bumps_version():
    runner, learner = _setup()
    frag = runner.sample()["batch"]
    v0, w0 = learner.get_weights()
    stats = learner.update([frag], env_steps_sampled=128)
    v1, w1 = learner.get_weights()
    assert v1 == v0 + 1 == stats["weights_version"]
    assert not np.allclose(w0, w1)
    assert stats["num_samples"] == 128
    assert stats["num_sgd_steps"] == 4
    for key in ("policy_loss", "vf_loss", "entropy", "kl", "clip_frac", "grad_norm", "vf_explained_var"):
        assert np.isfinite(stats[key]), key
    assert 0.0 < stats["entropy"] <= np.log(2) + 1e-6


def test_invalid_rows_are_dropped():
    runner, learner = _setup()
    frag = runner.sample()["batch"]
    frag["valid"][3, 1] = False
    frag["valid"][10, 2] = False
    assert learner.update([frag])["num_samples"] == 126


def test_lr_schedule_is_applied():
    runner, learner = _setup(lr=1.0, lr_schedule=[[0, 0.01], [1000, 0.0]])
    stats = learner.update([runner.sample()["batch"]], env_steps_sampled=250)
    assert stats["lr"] == pytest.approx(0.0075)


def test_state_roundtrip_reproduces_the_next_update():
    runner, a = _setup(seed=1)
    frag = runner.sample()["batch"]
    a.update([frag])
    state = codec.decode(codec.encode(a.get_state()))  # what a checkpoint holds
    _, b = _setup(seed=2)
    b.set_state(state)
    assert b.get_weights()[0] == a.get_weights()[0]
    np.testing.assert_array_equal(b.get_weights()[1], a.get_weights()[1])
    sa = a.update([frag])
    sb = b.update([frag])
    np.testing.assert_allclose(a.get_weights()[1], b.get_weights()[1], rtol=1e-6, atol=1e-7)
    assert sa["policy_loss"] == pytest.approx(sb["policy_loss"], rel=1e-5)


def test_state_with_other_shapes_is_refused():
    _, a = _setup()
    for hiddens, match in (([8, 8], "shape"), ([8], "parameters differ")):
        cfg = PPOConfig().environment("CartPole-v1").training(model={"fcnet_hiddens": hiddens})
        b = PPOLearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
        with pytest.raises(ValueError, match=match):
            b.set_state(a.get_state())


def test_flat_buffers_live_where_the_model_does():
    """A GPU learner's flat parameter and grad must stay on its device ("meta" stands in
    for CUDA here: a buffer made on the CPU would not take a meta tensor's values)."""
    from ftrl.rl.learning.learner import _flatten_parameters

    params = [torch.nn.Parameter(torch.empty(3, 4, device="meta")), torch.nn.Parameter(torch.empty(5, device="meta"))]
    flat, grad = _flatten_parameters(params)
    assert flat.device.type == "meta" and grad.device.type == "meta" and flat.numel() == 17
    assert all(p.device.type == "meta" and p.grad.device.type == "meta" for p in params)


def test_reset_optimizer_makes_the_next_update_that_of_a_fresh_learner():
    runner, trained = _setup(seed=3)
    frag = runner.sample()["batch"]
    trained.update([frag])  # Adam has moments now
    _, fresh = _setup(seed=3)
    fresh.set_weights(*trained.get_weights())
    trained.reset_optimizer()
    trained.rng = np.random.default_rng(0)
    fresh.rng = np.random.default_rng(0)
    trained.update([frag])
    fresh.update([frag])
    np.testing.assert_array_equal(trained.get_weights()[1], fresh.get_weights()[1])
