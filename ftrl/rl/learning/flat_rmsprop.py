"""RMSProp on the learner's one flat parameter tensor, without `torch.optim` (see
flat_adam.py for why), in two forms.

torch's (`torch.optim.RMSprop`, centered=False, weight_decay=0, maximize=False; RLlib's
torch IMPALA), epsilon added outside the square root, the average starting at 0:

    v = alpha v + (1 - alpha) g^2
    momentum > 0:  b = momentum b + g / (sqrt(v) + eps);  p -= lr b
    else:          p -= lr g / (sqrt(v) + eps)

TensorFlow's (`tf.compat.v1.train.RMSPropOptimizer`, `tf_style=True`; the IMPALA paper's
agent and RLlib's TensorFlow IMPALA, whose `epsilon` configs such as seed 002's 0.1 mean
this form), epsilon inside the square root, the average starting at 1, the learning rate
inside the momentum buffer:

    v = alpha v + (1 - alpha) g^2;  b = momentum b + lr g / sqrt(v + eps);  p -= b

The two agree only for eps = 0 after the first steps; an epsilon is not carried from one
form to the other by any formula (with a large v both ignore it; with v near 0 TF's
divides by sqrt(eps), torch's by eps).

`state`, `param_groups`, `state_dict()` and `load_state_dict()` have torch's layout
(ftrl.rl.learning.flat_optimizer). Every setting is read at each step, so the learner
may change lr, alpha, eps and momentum between two steps.
"""

from __future__ import annotations

import torch

from ftrl.rl.learning.flat_optimizer import FlatOptimizer


class FlatRMSProp(FlatOptimizer):
    """RMSProp for one parameter tensor whose `.grad` holds its gradient."""

    state_keys = ("square_avg", "momentum_buffer")
    hyperparameter_keys = ("lr", "alpha", "eps", "momentum")

    def __init__(self, param: torch.Tensor, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 momentum: float = 0.0, tf_style: bool = False) -> None:
        if lr < 0 or eps < 0 or not 0.0 <= alpha <= 1.0 or momentum < 0:
            raise ValueError(f"invalid RMSProp settings: lr={lr}, alpha={alpha}, eps={eps}, momentum={momentum}")
        self.tf_style = bool(tf_style)
        super().__init__(param, {"lr": lr, "alpha": alpha, "eps": eps, "momentum": momentum,
                                 "centered": False, "weight_decay": 0.0, "maximize": False})

    def initial_value(self, key: str) -> float:
        return 1.0 if self.tf_style and key == "square_avg" else 0.0

    @torch.no_grad()
    def step(self) -> None:
        """One RMSProp step with the gradient in `param.grad` (none: nothing happens)."""
        grad = self.param.grad
        if grad is None:
            return
        group = self.param_groups[0]
        lr, alpha, eps, momentum = (float(group[k]) for k in ("lr", "alpha", "eps", "momentum"))
        state = self.buffers()
        state["step"] += 1
        square_avg = state["square_avg"]
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1.0 - alpha)
        if self.tf_style:
            denom = square_avg.add(eps).sqrt_()
            buf = state["momentum_buffer"]
            buf.mul_(momentum).addcdiv_(grad, denom, value=lr)
            self.param.sub_(buf)
            return
        denom = square_avg.sqrt().add_(eps)
        if momentum > 0:
            buf = state["momentum_buffer"]
            buf.mul_(momentum).addcdiv_(grad, denom)
            self.param.add_(buf, alpha=-lr)
        else:
            self.param.addcdiv_(grad, denom, value=-lr)
