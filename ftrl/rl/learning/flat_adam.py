"""Adam on the learner's one flat parameter tensor, without `torch.optim`.

`torch.optim.Adam(...)` imports `torch._dynamo` when it is built (~1.2 s of CPU and
~70 MB here, more than `import torch` itself), which every driver and learner would
pay before its first update. The learner keeps all parameters in one flat tensor with
one flat gradient, so Adam is five in-place tensor ops per step.

The update is torch.optim.Adam's (amsgrad=False, weight_decay=0, maximize=False):

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

`state`, `param_groups`, `defaults`, `state_dict()` and `load_state_dict()` have
torch's layout (`{"state": {0: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups":
[{"lr", "betas", "eps", ..., "params": [0]}]}`), so checkpoints written with
torch.optim.Adam load, and the learner mesh broadcasts the same tensors.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch


class FlatAdam:
    """Adam for one parameter tensor whose `.grad` holds its gradient."""

    #: the per-parameter state tensors (a learner mesh broadcasts them to joiners)
    state_keys = ("exp_avg", "exp_avg_sq")

    def __init__(self, param: torch.Tensor, lr: float = 1e-3, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999)) -> None:
        if lr < 0 or eps < 0 or not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid Adam settings: lr={lr}, eps={eps}, betas={betas}")
        self.param = param
        self.defaults: dict[str, Any] = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": 0.0,
                                         "amsgrad": False, "maximize": False, "fused": None}
        self.param_groups: list[dict[str, Any]] = [{**self.defaults, "params": [param]}]
        #: keyed by the parameter tensor, a defaultdict(dict) as torch.optim's
        self.state: defaultdict[torch.Tensor, dict[str, torch.Tensor]] = defaultdict(dict)

    def _moments(self) -> dict[str, torch.Tensor]:
        state = self.state[self.param]
        if not state:
            state.update({
                "step": torch.zeros((), dtype=torch.float32),
                "exp_avg": torch.zeros_like(self.param, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(self.param, memory_format=torch.preserve_format),
            })
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step with the gradient in `param.grad` (none: nothing happens)."""
        grad = self.param.grad
        if grad is None:
            return
        group = self.param_groups[0]
        lr, eps = float(group["lr"]), float(group["eps"])
        beta1, beta2 = (float(b) for b in group["betas"])
        state = self._moments()
        state["step"] += 1
        t = float(state["step"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1.0 - beta2**t)).add_(eps)
        self.param.addcdiv_(exp_avg, denom, value=-lr / (1.0 - beta1**t))

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: parameter index 0."""
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        state = self.state.get(self.param)
        return {"state": {0: dict(state)} if state else {}, "param_groups": [{**group, "params": [0]}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what `state_dict` (or torch.optim.Adam's, for one parameter) returned."""
        groups = state_dict.get("param_groups") or []
        if len(groups) != 1:
            raise ValueError(f"expected the state of one parameter group, got {len(groups)}")
        group = groups[0]
        own = self.param_groups[0]
        for key in ("lr", "eps"):
            if key in group:
                own[key] = float(group[key])
        if "betas" in group:
            own["betas"] = tuple(float(b) for b in group["betas"])
        self.state.clear()
        saved = (state_dict.get("state") or {}).get(0)
        if saved:
            for key in ("exp_avg", "exp_avg_sq"):
                if tuple(saved[key].shape) != tuple(self.param.shape):
                    raise ValueError(f"optimizer {key} has shape {tuple(saved[key].shape)}, "
                                     f"expected {tuple(self.param.shape)}")
            self.state[self.param] = {
                "step": torch.as_tensor(saved["step"], dtype=torch.float32).reshape(()).clone(),
                "exp_avg": saved["exp_avg"].to(self.param.device, self.param.dtype).clone(),
                "exp_avg_sq": saved["exp_avg_sq"].to(self.param.device, self.param.dtype).clone(),
            }
