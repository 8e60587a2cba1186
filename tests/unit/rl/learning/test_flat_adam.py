"""FlatAdam is torch.optim.Adam on one flat tensor, without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ftrl.rl.learning.flat_adam import FlatAdam


def _pair(n: int = 50, lr: float = 3e-3, eps: float = 1e-5):
    start = torch.randn(n, generator=torch.Generator().manual_seed(0))
    ours = torch.nn.Parameter(start.clone())
    theirs = torch.nn.Parameter(start.clone())
    return ours, FlatAdam(ours, lr=lr, eps=eps), theirs, torch.optim.Adam([theirs], lr=lr, eps=eps, foreach=False)


def test_steps_match_torch_adam_with_a_changing_lr():
    ours, opt, theirs, ref = _pair()
    gen = torch.Generator().manual_seed(1)
    for i in range(30):
        grad = torch.randn(ours.shape, generator=gen) * (i + 1)
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        lr = 3e-3 * (1 - i / 30)  # as the learner's lr schedule sets it
        opt.param_groups[0]["lr"] = lr
        ref.param_groups[0]["lr"] = lr
        opt.step()
        ref.step()
    torch.testing.assert_close(ours.data, theirs.data, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(opt.state[ours]["exp_avg_sq"], ref.state[theirs]["exp_avg_sq"])
    assert float(opt.state[ours]["step"]) == 30.0


def test_state_dict_round_trip_and_loading_torch_adam_state():
    ours, opt, theirs, ref = _pair()
    for _ in range(3):
        ours.grad = theirs.grad = torch.ones_like(ours)
        opt.step()
        ref.step()
    # a checkpoint written with torch.optim.Adam loads and continues identically
    fresh = torch.nn.Parameter(theirs.data.clone())
    loaded = FlatAdam(fresh, lr=1.0)
    loaded.load_state_dict(ref.state_dict())
    assert loaded.param_groups[0]["lr"] == pytest.approx(3e-3)
    fresh.grad = theirs.grad = torch.full_like(fresh, 0.5)
    loaded.step()
    ref.step()
    torch.testing.assert_close(fresh.data, theirs.data, rtol=1e-5, atol=1e-6)
    # our own state_dict has torch's layout and survives a round trip
    sd = loaded.state_dict()
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"} and sd["param_groups"][0]["params"] == [0]
    again = FlatAdam(torch.nn.Parameter(fresh.data.clone()))
    again.load_state_dict(sd)
    torch.testing.assert_close(again.state[again.param]["exp_avg"], loaded.state[fresh]["exp_avg"])


def test_refuses_a_state_of_another_shape_and_bad_settings():
    _, opt, _, _ = _pair(n=50)
    other = FlatAdam(torch.nn.Parameter(torch.zeros(7)))
    other.param.grad = torch.ones(7)
    other.step()
    with pytest.raises(ValueError, match="shape"):
        opt.load_state_dict(other.state_dict())
    with pytest.raises(ValueError):
        FlatAdam(torch.nn.Parameter(torch.zeros(3)), lr=-1.0)


def test_a_learner_update_does_not_import_torch_dynamo():
    code = (
        "import sys\n"
        "from ftrl.config import PPOConfig\n"
        "cfg = PPOConfig().environment('CartPole-v1').training(train_batch_size=64, minibatch_size=32, num_epochs=2)\n"
        "algo = cfg.build()\n"
        "algo.train()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
