"""IMPALA and APPO learners, RMSProp, and the configs' bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import ftrl
from ftrl.config import APPOConfig, IMPALAConfig, config_class, load_job
from ftrl.rl.algorithms.appo import APPOLearner, clipped_surrogate_term
from ftrl.rl.algorithms.impala import IMPALALearner, column_subsets, steps_per_epoch, time_major
from ftrl.rl.learning.flat_rmsprop import FlatRMSProp
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.wire import codec
from ftrl.wire.errors import ConfigError


def _config(cls=APPOConfig, seed: int = 0, **training):
    return (cls().environment("CartPole-v1")
            .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=16)
            .training(train_batch_size=128, **training)
            .debugging(seed=seed))


def _fragments(cfg, learner, n: int = 2):
    runner = EnvRunner(cfg, set_torch_threads=False)
    runner.set_weights(*learner.get_weights())
    return [runner.sample()["batch"] for _ in range(n)]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_flat_rmsprop_is_torch_rmsprop(momentum):
    torch.manual_seed(0)
    mine = torch.nn.Parameter(torch.randn(50))
    ref = torch.nn.Parameter(mine.detach().clone())
    ours = FlatRMSProp(mine, lr=0.01, alpha=0.9, eps=1e-5, momentum=momentum)
    theirs = torch.optim.RMSprop([ref], lr=0.01, alpha=0.9, eps=1e-5, momentum=momentum)
    for step in range(5):
        grad = torch.randn(50, generator=torch.Generator().manual_seed(step))
        mine.grad = grad.clone()
        ref.grad = grad.clone()
        ours.step()
        theirs.step()
    torch.testing.assert_close(mine.detach(), ref.detach(), rtol=1e-6, atol=1e-7)
    ours_state = ours.state_dict()
    again = FlatRMSProp(torch.nn.Parameter(mine.detach().clone()), lr=0.5)
    again.load_state_dict(ours_state)
    assert again.param_groups[0]["lr"] == 0.01
    torch.testing.assert_close(again.state[again.param]["square_avg"], ours.state[mine]["square_avg"])


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_tf_style_rmsprop_is_tensorflow_s_update(momentum):
    """TF1's RMSPropOptimizer (the IMPALA paper's, seed 002's): ms starts at 1, epsilon inside
    the square root, lr inside the momentum buffer; written out here in numpy."""
    start = np.random.default_rng(0).normal(size=20).astype(np.float64)
    param = torch.nn.Parameter(torch.tensor(start))
    ours = FlatRMSProp(param, lr=0.01, alpha=0.99, eps=0.1, momentum=momentum, tf_style=True)
    var, ms, mom = start.copy(), np.ones_like(start), np.zeros_like(start)
    for step in range(6):
        grad = np.random.default_rng(step + 1).normal(size=20) * (step + 1)
        lr = 0.01 / (step + 1)  # the learner may change lr (and the others) between steps
        ours.param_groups[0]["lr"] = lr
        param.grad = torch.tensor(grad)
        ours.step()
        ms = 0.99 * ms + 0.01 * grad * grad
        mom = momentum * mom + lr * grad / np.sqrt(ms + 0.1)
        var = var - mom
    np.testing.assert_allclose(param.detach().numpy(), var, rtol=1e-10)
    torch_form = FlatRMSProp(torch.nn.Parameter(torch.tensor(start)), lr=0.01, alpha=0.99, eps=0.1)
    assert float(torch_form.buffers()["square_avg"].sum()) == 0.0 and float(ours.buffers()["square_avg"].min()) > 0.5


def test_optimizer_keys_are_read_at_every_update():
    cfg = _config(IMPALAConfig, opt_type="rmsprop_tf", lr=1e-3, epsilon=0.1, decay=0.99)
    learner = IMPALALearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
    assert float(learner.optimizer.state[learner._flat]["square_avg"].min()) == 1.0  # TF's start, mesh-ready
    frags = _fragments(cfg, learner)
    learner.update(frags)
    learner.set_hyperparams({"epsilon": 0.01, "decay": 0.9, "momentum": 0.5, "lr": 2e-3})
    square_avg = learner.optimizer.state[learner._flat]["square_avg"].clone()
    learner.update(frags)
    group = learner.optimizer.param_groups[0]
    assert (group["eps"], group["alpha"], group["momentum"], group["lr"]) == (0.01, 0.9, 0.5, 2e-3)
    grown = learner.optimizer.state[learner._flat]["square_avg"]
    assert torch.all(grown >= 0.9 * square_avg - 1e-7)  # decay 0.9 was applied to the average
    assert not torch.allclose(grown, 0.99 * square_avg, atol=1e-6)  # not the old 0.99
    assert float(learner.optimizer.state[learner._flat]["momentum_buffer"].abs().sum()) > 0


def test_a_summed_loss_is_the_mean_loss_times_the_steps_and_is_clipped_as_a_sum():
    """loss_reduction="sum" (RLlib's TF IMPALA): the same batch and weights give a gradient
    n times the mean's (n valid steps), which grad_clip then clips; live, so PBT can move it."""
    norms = {}
    for reduction in ("mean", "sum"):
        cfg = _config(IMPALAConfig, opt_type="rmsprop_tf", loss_reduction=reduction, grad_clip=None, seed=3)
        learner = IMPALALearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
        out = learner.update(_fragments(_config(IMPALAConfig, seed=3), learner))
        norms[reduction] = (out["grad_norm"], out["num_samples"])
    (mean_norm, n), (sum_norm, _) = norms["mean"], norms["sum"]
    assert sum_norm == pytest.approx(n * mean_norm, rel=1e-4)
    cfg = _config(IMPALAConfig, opt_type="rmsprop_tf", loss_reduction="sum", grad_clip=40.0, seed=3)
    learner = IMPALALearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
    before = learner.get_weights()[1]
    learner.update(_fragments(_config(IMPALAConfig, seed=3), learner))
    moved = np.abs(learner.get_weights()[1] - before).max()
    # TF's RMSProp, its average starting at 1: the first step is at most lr * clipped gradient / sqrt(~1)
    assert 0 < moved <= cfg.training_cfg.lr * 40.0 / np.sqrt(0.99) + 1e-6
    assert "loss_reduction" in ftrl.config.live_keys("IMPALA")


def test_appo_s_surrogate_ratio_is_pi_over_the_target_whatever_the_behaviour_policy():
    """r = pi / pi_target: a stale behaviour policy mu moves neither r nor what is clipped,
    until mu / pi_target passes 2 (the importance weight's cap, RLlib's)."""
    target = torch.log(torch.tensor([[0.2, 0.5], [0.4, 0.3]]))
    advantages = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    mask = torch.ones(2, 2)
    stale = target + torch.tensor([[-0.5, 0.4], [-1.5, 0.6]])  # mu / pi_target in [0.22, 1.83]
    loss, clipped = clipped_surrogate_term(target.clone(), stale, target, advantages, mask, clip_param=0.3)
    assert float(clipped) == 0.0 and float(loss) == pytest.approx(-float(advantages.sum()), rel=1e-6)
    moved = target + 0.05  # pi / pi_target = e^0.05, inside the clip range
    loss, clipped = clipped_surrogate_term(moved, stale, target, advantages, mask, clip_param=0.3)
    assert float(clipped) == 0.0
    assert float(loss) == pytest.approx(-float(np.exp(0.05) * advantages.sum()), rel=1e-5)
    far = target + 1.0  # mu / pi_target = e > 2: capped, so r = 2 pi / mu
    loss, clipped = clipped_surrogate_term(target.clone(), far, target, advantages, mask, clip_param=0.3)
    r = 2.0 * np.exp(-1.0)  # 0.74, inside [0.7, 1.3]
    assert float(clipped) == 0.0
    assert float(loss) == pytest.approx(-float(r * advantages.sum()), rel=1e-5)


@pytest.mark.parametrize("opt_type", ["adam", "rmsprop", "rmsprop_tf"])
def test_impala_update_learns_and_bumps_version(opt_type):
    cfg = _config(IMPALAConfig, opt_type=opt_type, lr=1e-3)
    learner = IMPALALearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
    frags = _fragments(cfg, learner)
    before = learner.get_weights()[1]
    out = learner.update(frags)
    assert learner.version == 1 and out["weights_version"] == 1
    assert out["num_samples"] == 2 * 16 * 4 and out["num_sgd_steps"] == 1
    assert all(np.isfinite(out[k]) for k in ("policy_loss", "vf_loss", "entropy", "grad_norm"))
    assert not np.array_equal(before, learner.get_weights()[1])
    assert set(learner.optimizer.state[learner._flat]) >= {"step", *learner.optimizer.state_keys}


def test_minibatches_take_whole_env_columns_and_every_epoch():
    cfg = _config(IMPALAConfig, num_epochs=3, minibatch_size=32)
    learner = IMPALALearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
    frags = _fragments(cfg, learner)
    assert steps_per_epoch(128, 32) == 4 and steps_per_epoch(128, None) == 1
    out = learner.update(frags)
    assert out["num_sgd_steps"] == 3 * 4
    batches = time_major(frags, torch.device("cpu"))
    assert len(batches) == 1 and batches[0]["rewards"].shape == (16, 8)
    sub = column_subsets(batches, [(0, 1), (0, 6)])[0]
    assert sub["rewards"].shape == (16, 2) and sub["last_values"].shape == (2,)
    torch.testing.assert_close(sub["obs"][:, 1], batches[0]["obs"][:, 6])
    # a mesh rank takes the steps the whole batch would: split_update says how many
    shards, options = IMPALALearner.split_update(cfg, frags, 2)
    assert options == {"sgd_steps_per_epoch": 4} and len(shards) == 2


def test_appo_target_network_follows_every_freq_updates_and_travels_in_the_state():
    cfg = _config(APPOConfig, target_network_update_freq=2, use_kl_loss=True, kl_coeff=0.3, lr=1e-2)
    spec = EnvRunner(cfg, set_torch_threads=False).spec
    learner = APPOLearner(cfg, spec)
    frags = _fragments(cfg, learner)
    start = learner._target_flat.clone()
    out = learner.update(frags)
    assert "kl" in out and "clip_frac" in out and out["kl_coeff"] == pytest.approx(0.3)
    torch.testing.assert_close(learner._target_flat, start)  # 1 update: not yet
    learner.update(frags)
    torch.testing.assert_close(learner._target_flat, learner._flat.data)  # 2 updates: tau=1 copies
    assert learner.kl_coeff != 0.3  # tuned at the target update (KL far from kl_target)
    # the state (through the wire codec) reproduces the next update bit for bit
    state = codec.decode(codec.encode(learner.get_state()))
    twin = APPOLearner(cfg, spec)
    twin.set_state(state)
    assert twin.kl_coeff == learner.kl_coeff
    torch.testing.assert_close(twin._target_flat, learner._target_flat)
    learner.update(frags)
    twin.update(frags)
    assert twin.digest() == learner.digest()
    # a mesh joiner gets the target network and the KL coefficient with the rest
    assert len(learner.state_tensors()) == 4 and learner.counters_tensor().numel() == 4


@pytest.mark.parametrize("times_the_kl,expected", [(20.0, 0.15), (0.1, 0.45)])
def test_appo_tunes_its_kl_coefficient_on_the_kl_per_step(times_the_kl, expected):
    """RLlib's rule on the mean KL a step since the last target update (not the KL summed
    over the batches): a target 20x the mean of the first two updates halves the coefficient
    (the third update's KL, ~4x the second's, stays below; the sum, ~128x the
    mean, would have grown it), a target a tenth of it grows it by 1.5."""
    cfg = _config(APPOConfig, target_network_update_freq=3, use_kl_loss=True, kl_coeff=0.3, lr=1e-3, seed=1)
    learner = APPOLearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
    frags = _fragments(cfg, learner)
    kls = [learner.update(frags)["kl"], learner.update(frags)["kl"]]
    assert kls[0] == 0.0 < kls[1]  # the first update's policy is the target
    mean = learner._mean_kl_since_target()
    assert mean == pytest.approx(sum(kls) / 2, rel=1e-6)  # per valid step, over both updates
    learner.hp = dataclasses.replace(learner.hp, kl_target=times_the_kl * mean)
    kls.append(learner.update(frags)["kl"])
    assert learner._kl_since_target == [0.0, 0.0]  # the target update started a new count
    assert learner.kl_coeff == pytest.approx(expected)


def test_appo_s_kl_in_a_learner_mesh_is_every_rank_s_steps():
    """Each rank adapts on the KL of all ranks' steps (the all-reduced sum and count), so the
    coefficients stay equal across a mesh."""
    cfg = _config(APPOConfig, target_network_update_freq=1, use_kl_loss=True, kl_coeff=0.3, kl_target=0.01, seed=1)
    learner = APPOLearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
    learner._kl_since_target = [0.0, 100.0]  # this rank: no KL over 100 steps
    other_rank = torch.tensor([3.0, 100.0], dtype=torch.float64)  # the other: 0.03 a step

    def allreduce(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.add_(other_rank)

    learner.allreduce = allreduce
    assert learner._mean_kl_since_target() == pytest.approx(3.0 / 200.0)  # 0.015: within [0.005, 0.02]
    learner.after_update()
    assert learner.kl_coeff == pytest.approx(0.3)  # alone, this rank's 0 would have halved it


def test_appo_reads_the_target_s_log_probabilities_off_the_model_when_their_weights_are_equal():
    """Right after a target update (and at the start) the target has the model's weights:
    its forward pass is skipped, and the update is the one with it, to float rounding."""
    cfg = _config(APPOConfig, target_network_update_freq=2, seed=2)
    spec = EnvRunner(cfg, set_torch_threads=False).spec
    learners = [APPOLearner(cfg, spec, seed=4) for _ in range(2)]
    learners[1]._forward_is_pure = False  # always the target's own forward pass
    frags = _fragments(cfg, learners[0])
    target_forwards = []
    evaluate = learners[0].target_model.evaluate
    learners[0].target_model.evaluate = lambda *a: target_forwards.append(1) or evaluate(*a)
    for update in range(4):
        outs = [learner.update(frags) for learner in learners]
        for key in ("policy_loss", "vf_loss", "entropy", "kl"):
            assert outs[0][key] == pytest.approx(outs[1][key], rel=1e-5, abs=1e-6), (update, key)
        np.testing.assert_allclose(learners[0].get_weights()[1], learners[1].get_weights()[1], rtol=0, atol=1e-6)
    assert len(target_forwards) == 2  # updates 2 and 4: the target was one update behind


def test_appo_snapshot_restores_the_target_network():
    cfg = _config(APPOConfig, target_network_update_freq=1)
    learner = APPOLearner(cfg, EnvRunner(cfg, set_torch_threads=False).spec)
    frags = _fragments(cfg, learner)
    snap = learner.snapshot()
    digest = learner.digest()
    learner.update(frags)
    assert learner.digest() != digest
    learner.restore(snap)
    assert learner.digest() == digest and learner.version == 0


@pytest.mark.parametrize("change, match", [
    ({"max_policy_lag": 0}, "max_policy_lag"),
    ({"learner_queue_size": 0}, "learner_queue_size"),
    ({"broadcast_interval": 0}, "broadcast_interval"),
    ({"opt_type": "sgd"}, "opt_type"),
    ({"minibatch_size": 1000}, "minibatch_size"),
    ({"vtrace_clip_rho_threshold": -1.0}, "vtrace_clip_rho_threshold"),
    ({"clip_param": 0.0}, "clip_param"),
    ({"tau": 1.5}, "tau"),
])
def test_bad_values_are_config_errors(change, match):
    with pytest.raises(ConfigError, match=match):
        APPOConfig().environment("CartPole-v1").training(**change).validate()


def test_deterministic_mode_needs_env_runners():
    with pytest.raises(ConfigError, match="num_env_runners"):
        IMPALAConfig().environment("CartPole-v1").training(deterministic=True).validate()


def test_algorithms_are_found_by_name():
    assert config_class("appo") is APPOConfig and config_class("IMPALA") is IMPALAConfig
    assert ftrl.APPOConfig is APPOConfig
    job = load_job(data={"algo": "APPO", "env": "CartPole-v1", "clip_param": 0.3, "stop": {"stop_iters": 2}})
    assert job.config.training_cfg.clip_param == 0.3 and job.config.training_cfg.vtrace is True
    with pytest.raises(ConfigError, match="clip_param"):
        load_job(data={"algo": "IMPALA", "env": "CartPole-v1", "clip_param": 0.3})  # IMPALA has none
