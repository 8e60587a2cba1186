"""What every actor-critic model shares: the action distributions (Categorical for
Discrete actions, a diagonal Gaussian with a state-independent log std for Box ones)
over the logits a model's `_forward` gives, and the weights as one flat float32 vector
in `layout` order.

A model subclasses `FlatActorCritic` and sets `spec`, `discrete`, `layout` ((name,
shape) of every parameter, in the order of the flat vector), `log_std` (a Parameter for
Box actions, else None) and writes `_forward(obs) -> (logits or means [B, act_dim],
values [B])`. Algorithms use only `act`, `evaluate`, `value`, `get_flat`, `set_flat`,
`num_params` and `layout`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ftrl.rl.spaces import SpaceSpec

_LOG_2PI = math.log(2 * math.pi)

Layout = list[tuple[str, tuple[int, ...]]]


def named_layout(module: nn.Module) -> Layout:
    """(name, shape) of every parameter of `module`, in `named_parameters()` order."""
    return [(name, tuple(p.shape)) for name, p in module.named_parameters()]


class FlatActorCritic(nn.Module):
    """Base of the actor-critic models: distributions and flat weights."""

    spec: SpaceSpec
    discrete: bool
    layout: Layout
    log_std: nn.Parameter | None

    def _forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits or action means [B, act_dim], values [B]) for flat obs [B, obs_dim]."""
        raise NotImplementedError

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs) for a batch [B, obs_dim] -> [B]."""
        return self._forward(obs)[1]

    def act(self, obs: torch.Tensor, explore: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or take the mode of) actions: returns actions, their log-probs, values."""
        out, values = self._forward(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            if explore:
                # argmax of p_i / E_i with E_i ~ Exp(1) picks i with probability p_i
                # (the exponential race; cheaper than torch.multinomial for small batches)
                actions = (logp_all.exp() / torch.empty_like(logp_all).exponential_()).argmax(dim=-1)
            else:
                actions = out.argmax(dim=-1)
            logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            return actions, logp, values
        log_std = self.log_std.expand_as(out)
        std = log_std.exp()
        actions = out + std * torch.randn_like(out) if explore else out
        logp = (-0.5 * ((actions - out) / std) ** 2 - log_std - 0.5 * _LOG_2PI).sum(-1)
        return actions, logp, values

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs of `actions`, policy entropy and values for a batch."""
        out, values = self._forward(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp, entropy, values
        log_std = self.log_std.expand_as(out)
        actions = actions.reshape(out.shape)
        logp = (-0.5 * ((actions - out) / log_std.exp()) ** 2 - log_std - 0.5 * _LOG_2PI).sum(-1)
        entropy = (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1)
        return logp, entropy, values

    # ---- flat weights

    def get_flat(self) -> np.ndarray:
        """All parameters as one float32 vector (a copy), in `layout` order."""
        params = dict(self.named_parameters())
        with torch.no_grad():
            return torch.cat([params[name].detach().reshape(-1) for name, _ in self.layout]).cpu().numpy().astype(np.float32, copy=True)

    def set_flat(self, flat: np.ndarray) -> None:
        """Load parameters from a vector laid out by `layout` (copied in place:
        parameters may be views of a flat buffer)."""
        flat = np.asarray(flat, dtype=np.float32).reshape(-1)
        n = self.num_params()
        if flat.size != n:
            raise ValueError(f"weights have {flat.size} values; this model has {n} parameters")
        if not np.isfinite(flat).all():
            raise ValueError("weights contain NaN or inf")
        source = torch.from_numpy(flat)
        params = dict(self.named_parameters())
        offset = 0
        with torch.no_grad():
            for name, shape in self.layout:
                p = params[name]
                size = p.numel()
                p.copy_(source[offset : offset + size].view(shape))
                offset += size

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def action_log_std(spec: SpaceSpec, init_log_std: float, free_log_std: bool) -> nn.Parameter | None:
    """Box actions: the state-independent log std (learned unless not `free_log_std`)."""
    if spec.act_kind == "discrete":
        return None
    init = torch.full((spec.act_dim,), float(init_log_std))
    return nn.Parameter(init, requires_grad=free_log_std)


def init_linear(layer: nn.Linear | nn.Conv2d, gain: float) -> nn.Module:
    """Orthogonal weights of `gain`, zero bias (the init of every ftrl model's layer)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
