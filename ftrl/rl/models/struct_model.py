"""The actor-critic for a Dict or Tuple observation holding images (an encoder per key,
as Sample Factory's): each image leaf goes through a conv body of its own (`conv_filters`
/ `conv_type` as for one image, uint8 pixels scaled to [0, 1]), the other leaves side
by side through an MLP (`fcnet_hiddens`, `fcnet_activation`); the features are
concatenated, go through `post_fcnet_hiddens` (default one layer of 256) and one shared
body feeds the policy and value heads. The action mask is not an input (the base
class applies it to the logits)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ftrl.config import ModelConfig
from ftrl.rl.models.actor_critic import mlp
from ftrl.rl.models.base import FlatActorCritic, action_log_std, init_linear, named_layout
from ftrl.rl.models.cnn import as_image, conv_body, fc_stack
from ftrl.rl.models.kinds import conv_plan, image_leaves, leaf_spec
from ftrl.rl.space_parts import MASK_KEY
from ftrl.rl.spaces import SpaceSpec


class StructActorCritic(FlatActorCritic):
    """A CNN per image leaf, an MLP over the rest, heads on their joined features."""

    def __init__(self, spec: SpaceSpec, model: ModelConfig | None = None):
        super().__init__()
        model = model or ModelConfig()
        self.spec = spec
        self.discrete = spec.act_kind == "discrete"
        images = image_leaves(spec)
        self.plans = [conv_plan(leaf_spec(p), model) for p in images]
        self.image_columns = [(p.offset, p.offset + p.dim) for p in images]
        self.scales = [1.0 / 255.0 if p.dtype == "uint8" else 1.0 for p in images]
        self.convs = nn.ModuleList(conv_body(plan, model.conv_activation) for plan in self.plans)
        vector = [c for p in spec.obs_parts if p.path != MASK_KEY and p not in images
                  for c in range(p.offset, p.offset + p.dim)]
        self.register_buffer("vector_columns", torch.as_tensor(vector, dtype=torch.long), persistent=False)
        self.has_vector = bool(vector)
        self.vector, vector_dim = nn.Sequential(), 0
        if vector:
            self.vector, vector_dim = mlp(len(vector), list(model.fcnet_hiddens), model.fcnet_activation)
        dim = sum(math.prod(plan.out_shape) for plan in self.plans) + vector_dim
        post = list(model.post_fcnet_hiddens) if model.post_fcnet_hiddens else [256]
        self.fc, dim = fc_stack(dim, post, model.conv_activation)
        self.feature_dim = dim
        self.pi_head = init_linear(nn.Linear(dim, spec.act_dim), 0.01)
        self.vf_head = init_linear(nn.Linear(dim, 1), 1.0)
        self.register_parameter("log_std", action_log_std(spec, model.init_log_std, model.free_log_std))
        self.layout = named_layout(self)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The joined features after `post_fcnet_hiddens` (what an LSTM wrapper reads)."""
        features = [conv(as_image(obs[:, lo:hi], plan, scale))
                    for conv, plan, (lo, hi), scale in zip(self.convs, self.plans, self.image_columns, self.scales,
                                                               strict=True)]
        if self.has_vector:
            features.append(self.vector(obs[:, self.vector_columns]))
        return self.fc(torch.cat(features, dim=-1))

    def _forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(obs)
        return self.pi_head(h), self.vf_head(h).squeeze(-1)
