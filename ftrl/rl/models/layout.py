"""The flat weight layout of the fully connected actor-critic, defined once: the torch
model (`ActorCritic.get_flat/set_flat`) and the numpy policy read and write the same
versioned flat vector through it."""

from __future__ import annotations

from ftrl.config import ModelConfig
from ftrl.rl.spaces import SpaceSpec


def flat_layout(spec: SpaceSpec, model: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(parameter name, shape) in the order of the flat weight vector."""
    layout: list[tuple[str, tuple[int, ...]]] = []

    def body(prefix: str) -> int:
        dim = spec.input_dim
        for k, h in enumerate(model.fcnet_hiddens):
            layout.append((f"{prefix}.{2 * k}.weight", (h, dim)))
            layout.append((f"{prefix}.{2 * k}.bias", (h,)))
            dim = h
        return dim

    last = body("pi_body")
    last_vf = last if model.vf_share_layers else body("vf_body")
    layout += [
        ("pi_head.weight", (spec.act_dim, last)),
        ("pi_head.bias", (spec.act_dim,)),
        ("vf_head.weight", (1, last_vf)),
        ("vf_head.bias", (1,)),
    ]
    if spec.box_dim:
        layout.append(("log_std", (spec.box_dim,)))
    return layout
