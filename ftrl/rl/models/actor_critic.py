"""Torch MLP actor-critic (the distributions and flat weights are `FlatActorCritic`'s):
Categorical policy for Discrete actions, diagonal Gaussian
(state-independent log std) for Box actions. The batch stores the sampled, unclipped
action; `env_action` clips it to the space's bounds for the env. Observations arrive
already encoded to flat float32 vectors (see `ftrl.rl.spaces`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ftrl.config import ModelConfig
from ftrl.rl.models.base import FlatActorCritic, action_log_std
from ftrl.rl.models.layout import flat_layout
from ftrl.rl.spaces import SpaceSpec, env_action

__all__ = ["ActorCritic", "env_action"]


_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "linear": nn.Identity}


def mlp(in_dim: int, hiddens: list[int], activation: str) -> tuple[nn.Sequential, int]:
    """Linear layers of `hiddens` with `activation` after each (orthogonal init); their out size."""
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


class ActorCritic(FlatActorCritic):
    """Policy and value MLPs (separate bodies unless `vf_share_layers`)."""

    def __init__(self, spec: SpaceSpec, model: ModelConfig | None = None):
        super().__init__()
        model = model or ModelConfig()
        self.spec = spec
        self.layout = flat_layout(spec, model)
        self.discrete = spec.act_kind == "discrete"
        hiddens = list(model.fcnet_hiddens)
        self.pi_body, dim = mlp(spec.input_dim, hiddens, model.fcnet_activation)
        self.feature_dim = dim
        self.share = model.vf_share_layers
        if self.share:
            self.vf_body = None
            vf_dim = dim
        else:
            self.vf_body, vf_dim = mlp(spec.input_dim, hiddens, model.fcnet_activation)
        self.pi_head = _head(dim, spec.act_dim, 0.01)
        self.vf_head = _head(vf_dim, 1, 1.0)
        self.register_parameter("log_std", action_log_std(spec, model.init_log_std, model.free_log_std))

    # ---- forward pieces

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy body's output (what an LSTM wrapper reads), [B, feature_dim]."""
        return self.pi_body(obs)

    def _forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.pi_body(obs)
        values = self.vf_head(h if self.vf_body is None else self.vf_body(obs)).squeeze(-1)
        return self.pi_head(h), values

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs) for a batch [B, obs_dim] -> [B]."""
        obs = self._input(obs)
        if self.vf_body is None:
            return self.vf_head(self.pi_body(obs)).squeeze(-1)
        return self.vf_head(self.vf_body(obs)).squeeze(-1)
