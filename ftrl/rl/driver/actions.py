"""The policy's action for one raw observation, in the driver (`Algorithm.compute_single_action`).

    actions = SingleActions(spec, model_config)
    action = actions.compute(obs, obs_filter, learner, explore=False)

The observation is encoded and filtered as in training (the central filter, not
updated). An in-process learner acts with its own model; with remote learners a local
copy of the newest weights does, made again only when their version changed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ftrl.rl.models.factory import build_model
from ftrl.rl.spaces import ObsEncoder, SpaceSpec, env_action


class SingleActions:
    """Actions for single observations, with a local model for remote learners."""

    def __init__(self, spec: SpaceSpec, model_config: Any) -> None:
        self.spec = spec
        self.model_config = model_config
        self._encoder = ObsEncoder(spec)
        self._local_model: tuple[int, Any] | None = None  # (weights version, model) of remote learners

    def compute(self, obs: Any, obs_filter: Any, learner: Any, explore: bool = False) -> Any:
        """The action of `learner`'s policy for `obs` (`obs_filter(x, update=False)` first)."""
        x = self._encoder.encode(obs)[None, :]
        x = obs_filter(x, update=False)
        model = getattr(learner, "model", None)
        if model is None:  # remote learners: a local copy of the latest weights
            version, weights = learner.get_weights()
            if self._local_model is None or self._local_model[0] != version:
                local = build_model(self.spec, self.model_config)
                local.set_flat(weights)
                self._local_model = (version, local)
            model = self._local_model[1]
        with torch.inference_mode():
            actions, _, _ = model.act(torch.from_numpy(np.ascontiguousarray(x, np.float32)), explore)
        return env_action(self.spec, actions.numpy())[0]
