"""Torch MLP actor-critic: Categorical policy for Discrete actions, diagonal Gaussian
(state-independent log std) for Box actions. The batch stores the sampled, unclipped
action; `env_action` clips it to the space's bounds for the env. Observations arrive
already encoded to flat float32 vectors (see `ftrl.rl.spaces`)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ftrl.config import ModelConfig
from ftrl.rl.models.layout import flat_layout
from ftrl.rl.spaces import SpaceSpec, env_action

__all__ = ["ActorCritic", "env_action"]

_LOG_2PI = math.log(2 * math.pi)


_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "linear": nn.Identity}


def _mlp(in_dim: int, hiddens: list[int], activation: str) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    dim = in_dim
    for h in hiddens:
        lin = nn.Linear(dim, h)
        nn.init.orthogonal_(lin.weight, math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers += [lin, _ACTIVATIONS[activation]()]
        dim = h
    return nn.Sequential(*layers), dim


def _head(in_dim: int, out_dim: int, gain: float) -> nn.Linear:
    lin = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.zeros_(lin.bias)
    return lin


class ActorCritic(nn.Module):
    """Policy and value MLPs (separate bodies unless `vf_share_layers`)."""

    def __init__(self, spec: SpaceSpec, model: ModelConfig | None = None):
        super().__init__()
        model = model or ModelConfig()
        self.spec = spec
        self.layout = flat_layout(spec, model)
        self.discrete = spec.act_kind == "discrete"
        hiddens = list(model.fcnet_hiddens)
        self.pi_body, dim = _mlp(spec.obs_dim, hiddens, model.fcnet_activation)
        self.share = model.vf_share_layers
        if self.share:
            self.vf_body = None
            vf_dim = dim
        else:
            self.vf_body, vf_dim = _mlp(spec.obs_dim, hiddens, model.fcnet_activation)
        self.pi_head = _head(dim, spec.act_dim, 0.01)
        self.vf_head = _head(vf_dim, 1, 1.0)
        if not self.discrete:
            init = torch.full((spec.act_dim,), float(model.init_log_std))
            self.log_std = nn.Parameter(init, requires_grad=model.free_log_std)
        else:
            self.register_parameter("log_std", None)

    # ---- forward pieces

    def _forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.pi_body(obs)
        values = self.vf_head(h if self.vf_body is None else self.vf_body(obs)).squeeze(-1)
        return self.pi_head(h), values

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs) for a batch [B, obs_dim] -> [B]."""
        if self.vf_body is None:
            return self.vf_head(self.pi_body(obs)).squeeze(-1)
        return self.vf_head(self.vf_body(obs)).squeeze(-1)

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
        """All parameters as one float32 vector (a copy), in `flat_layout` order."""
        params = dict(self.named_parameters())
        with torch.no_grad():
            return torch.cat([params[name].detach().reshape(-1) for name, _ in self.layout]).cpu().numpy().astype(np.float32, copy=True)

    def set_flat(self, flat: np.ndarray) -> None:
        """Load parameters from a vector laid out by `flat_layout` (copied in place:
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
