"""The policy's action for one raw observation, in the driver (`Algorithm.compute_single_action`).

    actions = SingleActions(spec, model_config)
    action = actions.compute(obs, obs_filter, learner, explore=False)
    batch_actions = actions.compute_batch(observations, obs_filter, learner)

The observation is encoded and filtered as in training (the central filter, not
updated). An in-process learner acts with its own model; with remote learners a local
copy of the newest weights does, made again only when their version changed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ftrl.rl.models.factory import build_model
from ftrl.rl.space_parts import ActionTree
from ftrl.rl.spaces import ObsEncoder, SpaceSpec, env_action


class SingleActions:
    """Actions for raw observations, with a local model for remote learners."""

    def __init__(self, spec: SpaceSpec, model_config: Any) -> None:
        self.spec = spec
        self.model_config = model_config
        self._encoder = ObsEncoder(spec)
        self._local_model: tuple[int, Any] | None = None  # (weights version, model) of remote learners

    def model_of(self, learner: Any) -> Any:
        """The model that acts: an in-process learner's own, else a local copy of the
        newest weights (made again only when their version changed)."""
        model = getattr(learner, "model", None)
        if model is not None:
            return model
        version, weights = learner.get_weights()
        if self._local_model is None or self._local_model[0] != version:
            local = build_model(self.spec, self.model_config)
            local.set_flat(weights)
            self._local_model = (version, local)
        return self._local_model[1]

    def compute(self, obs: Any, obs_filter: Any, learner: Any, explore: bool = False) -> Any:
        """The action of `learner`'s policy for `obs` (`obs_filter(x, update=False)` first)."""
        return self.compute_batch([obs], obs_filter, learner, explore)[0]

    def compute_batch(self, batch: Any, obs_filter: Any, learner: Any, explore: bool = False) -> list[Any]:
        """The actions for a batch of raw observations (a sequence, or an array whose first
        axis is the batch), as each env's step takes them."""
        items = list(batch)
        x = np.zeros((len(items), self.spec.obs_dim), np.float32)
        for i, obs in enumerate(items):
            self._encoder.write(x, i, obs)
        x = obs_filter(x, update=False)
        model = self.model_of(learner)
        device = next(model.parameters()).device
        with torch.inference_mode():
            actions, _, _ = model.act(torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(device), explore)
        return env_action(self.spec, actions.cpu().numpy())

    def initial_state(self, learner: Any) -> np.ndarray:
        """A recurrent policy's state at an episode's start; ValueError without one."""
        model = self.model_of(learner)
        if not getattr(model, "recurrent", False):
            raise ValueError("this policy has no state (it is not recurrent: model use_lstm is off)")
        return model.initial_state(1)[0].numpy()

    def compute_recurrent(self, obs: Any, state: Any, prev_action: Any, prev_reward: float | None, obs_filter: Any,
                          learner: Any, explore: bool = False) -> tuple[Any, np.ndarray]:
        """(action, next state) of a recurrent policy for one raw observation from `state`."""
        model = self.model_of(learner)
        if not getattr(model, "recurrent", False):
            raise ValueError("a state was given, but this policy has none (model use_lstm is off)")
        want = tuple(model.initial_state(1).shape[1:])
        state = np.asarray(state, np.float32).reshape(-1)
        if state.shape != want:
            raise ValueError(f"state has {state.size} values; this policy's has {want[0]} (get_initial_state())")
        x = np.zeros((1, self.spec.obs_dim), np.float32)
        self._encoder.write(x, 0, obs)
        x = obs_filter(x, update=False)
        spec = self.spec
        action = np.zeros((1, *spec.action_row_shape), spec.action_dtype)
        if prev_action is not None:
            action[0] = _stored_action(spec, prev_action)
        device = next(model.parameters()).device
        with torch.inference_mode():
            a, _, _, new_state = model.act_step(
                torch.from_numpy(x).to(device), torch.from_numpy(state[None]).to(device),
                torch.from_numpy(action).to(device),
                torch.tensor([float(prev_reward or 0.0)], device=device), explore)
        return env_action(spec, a.cpu().numpy())[0], new_state[0].cpu().numpy()


def _stored_action(spec: SpaceSpec, action: Any) -> np.ndarray:
    """An action as the env took it -> its row as a batch stores it."""
    if spec.act_kind == "multi":
        return np.asarray(ActionTree(spec.act_tree, spec.act_low, spec.act_high).to_row(action), spec.action_dtype)
    return np.asarray(action, spec.action_dtype).reshape(spec.action_row_shape)
