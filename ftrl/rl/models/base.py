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

from ftrl.rl.space_parts import MASKED_LOGIT
from ftrl.rl.spaces import SpaceSpec, action_slices, masked_logit_columns

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
        return self._forward(self._input(obs))[1]

    def _input(self, obs: torch.Tensor) -> torch.Tensor:
        """The columns of the rows the network reads (all but an action mask), as float:
        uint8 rows (pixels) become float here, on the model's device."""
        mask_dim = self.spec.mask_dim
        if not obs.is_floating_point():
            obs = obs.float()
        return obs[:, : obs.shape[1] - mask_dim] if mask_dim else obs

    def _outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits or means, values), the logits of masked choices pushed to a huge negative."""
        out, values = self._forward(self._input(obs))
        return self._masked(out, obs), values

    def _masked(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """`out` with the logits of the choices `obs`'s action mask forbids at MASKED_LOGIT."""
        mask_dim = self.spec.mask_dim
        if not mask_dim:
            return out
        allowed = obs[:, obs.shape[1] - mask_dim:] > 0
        if self.spec.act_kind != "discrete" or self.spec.act_dim != mask_dim:
            full = torch.ones(out.shape, dtype=torch.bool, device=out.device)
            full[:, masked_logit_columns(self.spec)] = allowed
            allowed = full
        return out.masked_fill(~allowed, MASKED_LOGIT)

    def act(self, obs: torch.Tensor, explore: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or take the mode of) actions: returns actions, their log-probs, values."""
        out, values = self._outputs(obs)
        return (*self._sample(out, explore), values)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs of `actions`, policy entropy and values for a batch."""
        out, values = self._outputs(obs)
        return (*self._score(out, actions), values)

    def _sample(self, out: torch.Tensor, explore: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions drawn from (or the mode of) the distribution of `out`, and their log-probs."""
        if self.spec.act_kind == "multi":
            return self._act_parts(out, explore)
        if self.discrete:
            return _categorical_act(out, explore)
        return _gaussian_act(out, self.log_std, explore)

    def _score(self, out: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of `actions` under the distribution of `out`, and its entropy."""
        if self.spec.act_kind == "multi":
            return self._evaluate_parts(out, actions)
        if self.discrete:
            return _categorical_evaluate(out, actions.long())
        return _gaussian_evaluate(out, self.log_std, actions.reshape(out.shape))

    def _act_parts(self, out: torch.Tensor, explore: bool) -> tuple[torch.Tensor, torch.Tensor]:
        columns, logp = [], torch.zeros(out.shape[0], device=out.device)
        for s in action_slices(self.spec):
            if s.kind == "discrete":
                a, lp = _categorical_act(out[:, s.lo: s.hi], explore)
                columns.append(a.unsqueeze(-1))
            else:
                a, lp = _gaussian_act(out[:, s.lo: s.hi], self.log_std[s.box: s.box + s.cols], explore)
                columns.append(a)
            logp = logp + lp
        if self.spec.all_discrete:
            return torch.cat(columns, dim=-1), logp
        return torch.cat([c.to(out.dtype) for c in columns], dim=-1), logp

    def _evaluate_parts(self, out: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = entropy = torch.zeros(out.shape[0], device=out.device)
        for s in action_slices(self.spec):
            taken = actions[:, s.col: s.col + s.cols]
            if s.kind == "discrete":
                lp, ent = _categorical_evaluate(out[:, s.lo: s.hi], taken[:, 0].long())
            else:
                lp, ent = _gaussian_evaluate(out[:, s.lo: s.hi], self.log_std[s.box: s.box + s.cols],
                                             taken.to(out.dtype))
            logp, entropy = logp + lp, entropy + ent
        return logp, entropy

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
    if not spec.box_dim:
        return None
    init = torch.full((spec.box_dim,), float(init_log_std))
    return nn.Parameter(init, requires_grad=free_log_std)


def init_linear(layer: nn.Linear | nn.Conv2d, gain: float) -> nn.Module:
    """Orthogonal weights of `gain`, zero bias (the init of every ftrl model's layer)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _categorical_act(logits: torch.Tensor, explore: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions [B] (sampled, or the mode) and their log-probs."""
    logp_all = torch.log_softmax(logits, dim=-1)
    if explore:
        # argmax of p_i / E_i with E_i ~ Exp(1) picks i with probability p_i
        # (the exponential race; cheaper than torch.multinomial for small batches)
        actions = (logp_all.exp() / torch.empty_like(logp_all).exponential_()).argmax(dim=-1)
    else:
        actions = logits.argmax(dim=-1)
    return actions, logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def _categorical_evaluate(logits: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of `actions` [B] and the entropy."""
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def _gaussian_act(means: torch.Tensor, log_std: torch.Tensor, explore: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions [B, D] (sampled, or the means) and their log-probs."""
    log_std = log_std.expand_as(means)
    std = log_std.exp()
    actions = means + std * torch.randn_like(means) if explore else means
    logp = (-0.5 * ((actions - means) / std) ** 2 - log_std - 0.5 * _LOG_2PI).sum(-1)
    return actions, logp


def _gaussian_evaluate(means: torch.Tensor, log_std: torch.Tensor,
                       actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of `actions` [B, D] and the entropy."""
    log_std = log_std.expand_as(means)
    logp = (-0.5 * ((actions - means) / log_std.exp()) ** 2 - log_std - 0.5 * _LOG_2PI).sum(-1)
    return logp, (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1)
