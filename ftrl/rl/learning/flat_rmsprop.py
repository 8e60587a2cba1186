"""RMSProp on the learner's one flat parameter tensor, without `torch.optim` (see
flat_adam.py for why). The update is torch.optim.RMSprop's (centered=False,
weight_decay=0, maximize=False), as IMPALA used it:

    v = alpha v + (1 - alpha) g^2
    momentum > 0:  b = momentum b + g / (sqrt(v) + eps);  p -= lr b
    else:          p -= lr g / (sqrt(v) + eps)

`state`, `param_groups`, `state_dict()` and `load_state_dict()` have torch's layout
(`{"state": {0: {"step", "square_avg", "momentum_buffer"}}, ...}`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch


class FlatRMSProp:
    """RMSProp for one parameter tensor whose `.grad` holds its gradient."""

    #: the per-parameter state tensors (a learner mesh broadcasts them to joiners)
    state_keys = ("square_avg", "momentum_buffer")

    def __init__(self, param: torch.Tensor, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 momentum: float = 0.0) -> None:
        if lr < 0 or eps < 0 or not 0.0 <= alpha <= 1.0 or momentum < 0:
            raise ValueError(f"invalid RMSProp settings: lr={lr}, alpha={alpha}, eps={eps}, momentum={momentum}")
        self.param = param
        self.defaults: dict[str, Any] = {"lr": lr, "alpha": alpha, "eps": eps, "momentum": momentum,
                                         "centered": False, "weight_decay": 0.0, "maximize": False}
        self.param_groups: list[dict[str, Any]] = [{**self.defaults, "params": [param]}]
        self.state: defaultdict[torch.Tensor, dict[str, torch.Tensor]] = defaultdict(dict)

    def _buffers(self) -> dict[str, torch.Tensor]:
        state = self.state[self.param]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            for key in self.state_keys:
                state[key] = torch.zeros_like(self.param, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One RMSProp step with the gradient in `param.grad` (none: nothing happens)."""
        grad = self.param.grad
        if grad is None:
            return
        group = self.param_groups[0]
        lr, alpha, eps, momentum = (float(group[k]) for k in ("lr", "alpha", "eps", "momentum"))
        state = self._buffers()
        state["step"] += 1
        square_avg = state["square_avg"]
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1.0 - alpha)
        denom = square_avg.sqrt().add_(eps)
        if momentum > 0:
            buf = state["momentum_buffer"]
            buf.mul_(momentum).addcdiv_(grad, denom)
            self.param.add_(buf, alpha=-lr)
        else:
            self.param.addcdiv_(grad, denom, value=-lr)

    def state_dict(self) -> dict[str, Any]:
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        state = self.state.get(self.param)
        return {"state": {0: dict(state)} if state else {}, "param_groups": [{**group, "params": [0]}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict.get("param_groups") or []
        if len(groups) != 1:
            raise ValueError(f"expected the state of one parameter group, got {len(groups)}")
        own = self.param_groups[0]
        for key in ("lr", "alpha", "eps", "momentum"):
            if key in groups[0]:
                own[key] = float(groups[0][key])
        self.state.clear()
        saved = (state_dict.get("state") or {}).get(0)
        if saved:
            restored = {"step": torch.as_tensor(saved["step"], dtype=torch.float32).reshape(()).clone()}
            for key in self.state_keys:
                value = saved.get(key)
                if value is None:
                    value = torch.zeros_like(self.param)
                if tuple(value.shape) != tuple(self.param.shape):
                    raise ValueError(f"optimizer {key} has shape {tuple(value.shape)}, expected {tuple(self.param.shape)}")
                restored[key] = value.to(self.param.device, self.param.dtype).clone()
            self.state[self.param] = restored
