"""`check_model`: a model that cannot work on the spaces is refused before any process
starts. The choice of network is `kinds.model_kind`'s (no torch); a model that needs
torch is built once, on the CPU, by `factory.build_model` (imported only then, so the
CLI's early checks of a fully connected model never import torch)."""

from __future__ import annotations

from ftrl.config import ModelConfig
from ftrl.rl.models.kinds import model_kind
from ftrl.rl.spaces import SpaceSpec


def check_model(spec: SpaceSpec, model: ModelConfig) -> None:
    """Raise ConfigError now for a model that cannot work on these spaces: the choice of
    network always, without torch; a model that needs torch is built once on the CPU (a
    custom module's import, constructor and output shapes), leaving torch's random state
    as it was."""
    if model_kind(spec, model) == "fc":
        return
    import torch

    from ftrl.rl.models.factory import build_model

    with torch.random.fork_rng(devices=[]):
        build_model(spec, model)
