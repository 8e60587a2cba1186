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
        return self._recurrent_model(learner).initial_state(1)[0].numpy()

    def _recurrent_model(self, learner: Any) -> Any:
        model = self.model_of(learner)
        if not getattr(model, "recurrent", False):
            raise ValueError("this policy keeps no state (model use_lstm is off and no custom recurrent model "
                             "is set): call it without a state")
        return model

    def compute_recurrent(self, obs: Any, state: Any, prev_action: Any, prev_reward: float | None, obs_filter: Any,
                          learner: Any, explore: bool = False) -> tuple[Any, np.ndarray]:
        """(action, next state) of a recurrent policy for one raw observation from `state`."""
        actions, states = self.compute_recurrent_batch(
            [obs], np.asarray(state, np.float32).reshape(1, -1), None if prev_action is None else [prev_action],
            None if prev_reward is None else [prev_reward], obs_filter, learner, explore)
        return actions[0], states[0]

    def compute_recurrent_batch(self, batch: Any, states: Any, prev_actions: Any, prev_rewards: Any,
                                obs_filter: Any, learner: Any, explore: bool = False) -> tuple[list[Any], np.ndarray]:
        """(actions, next states [N, S]) of a recurrent policy for N raw observations from
        `states` [N, S]; `prev_actions`/`prev_rewards`: N each, or None (zero, as at an
        episode's start)."""
        model = self._recurrent_model(learner)
        items = list(batch)
        n, want = len(items), int(model.initial_state(1).shape[1])
        states = np.asarray(states, np.float32)
        if states.shape != (n, want):
            got = f"{states.size} values" if n == 1 else f"shape {states.shape}"
            raise ValueError(f"state has {got}; this policy's has {want} per observation (get_initial_state())")
        spec = self.spec
        x = np.zeros((n, spec.obs_dim), np.float32)
        action = np.zeros((n, *spec.action_row_shape), spec.action_dtype)
        reward = np.zeros(n, np.float32)
        for i, obs in enumerate(items):
            self._encoder.write(x, i, obs)
            if prev_actions is not None:
                action[i] = _stored_action(spec, prev_actions[i])
            if prev_rewards is not None:
                reward[i] = float(prev_rewards[i] or 0.0)
        x = obs_filter(x, update=False)
        device = next(model.parameters()).device
        with torch.inference_mode():
            a, _, _, new_states = model.act_step(
                torch.from_numpy(np.ascontiguousarray(x)).to(device), torch.from_numpy(states).to(device),
                torch.from_numpy(action).to(device), torch.from_numpy(reward).to(device), explore)
        return list(env_action(spec, a.cpu().numpy())), new_states.cpu().numpy()


def _stored_action(spec: SpaceSpec, action: Any) -> np.ndarray:
    """An action as the env took it -> its row as a batch stores it."""
    if spec.act_kind == "multi":
        return np.asarray(ActionTree(spec.act_tree, spec.act_low, spec.act_high).to_row(action), spec.action_dtype)
    return np.asarray(action, spec.action_dtype).reshape(spec.action_row_shape)
