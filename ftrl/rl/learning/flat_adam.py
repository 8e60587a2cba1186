"""Adam on the learner's one flat parameter tensor, without `torch.optim`.

`torch.optim.Adam(...)` imports `torch._dynamo` when it is built (~1.2 s of CPU and
~70 MB here, more than `import torch` itself), which every driver and learner would
pay before its first update. The learner keeps all parameters in one flat tensor with
one flat gradient, so Adam is five in-place tensor ops per step.

The update is torch.optim.Adam's (amsgrad=False, weight_decay=0, maximize=False):

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

`state`, `param_groups`, `defaults`, `state_dict()` and `load_state_dict()` have
torch's layout (ftrl.rl.learning.flat_optimizer), so checkpoints written with
torch.optim.Adam load, and the learner mesh broadcasts the same tensors.
"""

from __future__ import annotations

import math

import torch

from ftrl.rl.learning.flat_optimizer import FlatOptimizer


class FlatAdam(FlatOptimizer):
    """Adam for one parameter tensor whose `.grad` holds its gradient."""

    state_keys = ("exp_avg", "exp_avg_sq")
    hyperparameter_keys = ("lr", "eps", "betas")

    def __init__(self, param: torch.Tensor, lr: float = 1e-3, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999)) -> None:
        if lr < 0 or eps < 0 or not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid Adam settings: lr={lr}, eps={eps}, betas={betas}")
        super().__init__(param, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": 0.0,
                                 "amsgrad": False, "maximize": False, "fused": None})

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step with the gradient in `param.grad` (none: nothing happens)."""
        grad = self.param.grad
        if grad is None:
            return
        group = self.param_groups[0]
        lr, eps = float(group["lr"]), float(group["eps"])
        beta1, beta2 = (float(b) for b in group["betas"])
        state = self.buffers()
        state["step"] += 1
        t = float(state["step"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1.0 - beta2**t)).add_(eps)
        self.param.addcdiv_(exp_avg, denom, value=-lr / (1.0 - beta1**t))
