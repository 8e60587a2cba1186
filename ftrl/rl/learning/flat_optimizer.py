"""What the flat optimizers (flat_adam.FlatAdam, flat_rmsprop.FlatRMSProp) share: one
parameter tensor, torch.optim's attributes (`defaults`, `param_groups`, `state`) and
its `state_dict()` layout (`{"state": {0: {"step", *state_keys}}, "param_groups":
[{..., "params": [0]}]}`), so checkpoints of the torch optimizer load and the learner
mesh broadcasts the same tensors. A subclass names its buffers (`state_keys`), the
settings a state dict carries (`hyperparameter_keys`) and writes `step()`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch


class FlatOptimizer:
    """The shell of an optimizer of one parameter tensor whose `.grad` holds its gradient."""

    #: the per-parameter state tensors (a learner mesh broadcasts them to joiners)
    state_keys: tuple[str, ...] = ()
    #: the numeric settings `load_state_dict` takes from a saved param group
    hyperparameter_keys: tuple[str, ...] = ("lr",)

    def initial_value(self, key: str) -> float:
        """What state buffer `key` holds before the first step (0 unless a subclass says)."""
        return 0.0

    def new_buffer(self, key: str) -> torch.Tensor:
        """State buffer `key` as it is before the first step, shaped like the parameter."""
        return torch.full_like(self.param, self.initial_value(key), memory_format=torch.preserve_format)

    def __init__(self, param: torch.Tensor, defaults: dict[str, Any]) -> None:
        self.param = param
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = [{**defaults, "params": [param]}]
        #: keyed by the parameter tensor, a defaultdict(dict) as torch.optim's
        self.state: defaultdict[torch.Tensor, dict[str, torch.Tensor]] = defaultdict(dict)

    def buffers(self) -> dict[str, torch.Tensor]:
        """The parameter's state, made (zeros, step 0) on first use."""
        state = self.state[self.param]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            for key in self.state_keys:
                state[key] = self.new_buffer(key)
        return state

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: parameter index 0."""
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        state = self.state.get(self.param)
        return {"state": {0: dict(state)} if state else {}, "param_groups": [{**group, "params": [0]}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what `state_dict` (or the torch optimizer's, for one parameter) returned; a
        buffer the saved state lacks starts as before a first step."""
        groups = state_dict.get("param_groups") or []
        if len(groups) != 1:
            raise ValueError(f"expected the state of one parameter group, got {len(groups)}")
        own = self.param_groups[0]
        for key in self.hyperparameter_keys:
            if key in groups[0]:
                value = groups[0][key]
                own[key] = tuple(float(v) for v in value) if isinstance(value, list | tuple) else float(value)
        self.state.clear()
        saved = (state_dict.get("state") or {}).get(0)
        if not saved:
            return
        restored = {"step": torch.as_tensor(saved["step"], dtype=torch.float32).reshape(()).clone()}
        for key in self.state_keys:
            value = saved.get(key)
            if value is None:
                value = self.new_buffer(key)
            if tuple(value.shape) != tuple(self.param.shape):
                raise ValueError(f"optimizer {key} has shape {tuple(value.shape)}, expected {tuple(self.param.shape)}")
            restored[key] = value.to(self.param.device, self.param.dtype).clone()
        self.state[self.param] = restored
