"""APPO: IMPALA's asynchronous data path and V-trace, with PPO's clipped surrogate
against a target network (as RLlib's APPO). Top to bottom:

    config        APPOConfig / APPOTrainingConfig (ftrl/config/appo.py: torch-free)
    appo_loss     the clipped surrogate on V-trace advantages, the value loss, the
                  entropy bonus and (use_kl_loss) the KL to the target policy
    APPOLearner   IMPALA's learner plus the target network (and the adaptive KL coefficient)
    APPO          IMPALA's driver with this learner

The target network is the learner's policy of a few updates ago: updated every
`target_network_update_freq` updates as target = tau * current + (1 - tau) * target.
V-trace corrects from the behaviour policy (the runners') to the target policy; the
surrogate's ratio is pi / pi_target, with the importance weight pi_target / mu clipped
to [0, 2] (RLlib's). The KL term is estimated on the batch's actions
(E[(r - 1) - log r], r = pi / pi_target).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ftrl.config.appo import APPOConfig, APPOTrainingConfig
from ftrl.rl.algorithms.impala import IMPALA, IMPALALearner, impala_loss

__all__ = ["APPO", "APPOConfig", "APPOLearner", "APPOTrainingConfig", "appo_loss"]


def appo_loss(model: torch.nn.Module, target_model: torch.nn.Module, batch: dict[str, torch.Tensor],
              hp: APPOTrainingConfig, kl_coeff: float) -> tuple[torch.Tensor, dict[str, Any]]:
    """APPO's loss of one [T, B] batch, summed over valid steps; and its statistics."""
    t_len, width = batch["rewards"].shape
    with torch.no_grad():
        obs = batch["obs"].reshape(t_len * width, -1)
        actions = batch["actions"].reshape((t_len * width, *batch["actions"].shape[2:]))
        target_logp = target_model.evaluate(obs, actions)[0].reshape(t_len, width)
    _, parts = impala_loss(model, batch, hp, target_logp=target_logp)
    logp, adv, mask = parts["logp"], parts["pg_adv"], parts["mask"]
    is_ratio = torch.exp(target_logp - batch["logp"]).clamp(0.0, 2.0)
    ratio = is_ratio * torch.exp(logp - batch["logp"])
    surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - hp.clip_param, 1.0 + hp.clip_param) * adv)
    policy_loss = -(surrogate * mask).sum()
    log_r = logp - target_logp
    kl = (((log_r.exp() - 1.0) - log_r) * mask).sum()
    loss = policy_loss + hp.vf_loss_coeff * parts["vf_loss"] - hp.entropy_coeff * parts["entropy"]
    if hp.use_kl_loss:
        loss = loss + kl_coeff * kl
    with torch.no_grad():
        clipped = (((ratio - 1.0).abs() > hp.clip_param).to(mask.dtype) * mask).sum()
    return loss, {"policy_loss": policy_loss.detach(), "vf_loss": parts["vf_loss"].detach(),
                  "entropy": parts["entropy"].detach(),
                  "kl": kl.detach(), "clip_frac": clipped}


class APPOLearner(IMPALALearner):
    """IMPALA's learner with a target network (part of the state a mesh broadcasts and a
    checkpoint holds) and the adaptive KL coefficient."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target_model = copy.deepcopy(self.model)
        for p in self.target_model.parameters():
            p.requires_grad_(False)
        self._target_flat = torch.nn.utils.parameters_to_vector(self.target_model.parameters()).detach()
        torch.nn.utils.vector_to_parameters(self._target_flat, self.target_model.parameters())
        self._target_views()
        self.kl_coeff = float(self.hp.kl_coeff)
        self._kl_since_target = 0.0

    def _target_views(self) -> None:
        """Make the target parameters views of one flat tensor (one copy per update)."""
        offset = 0
        for p in self.target_model.parameters():
            n = p.numel()
            p.data = self._target_flat[offset : offset + n].view_as(p)
            offset += n

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        loss, stats = appo_loss(self.model, self.target_model, batch, self.hp, self.kl_coeff)
        self._kl_since_target += float(stats["kl"])
        return loss, stats

    def after_update(self) -> None:
        if self.num_updates % self.hp.target_network_update_freq:
            return
        tau = self.hp.tau
        with torch.no_grad():
            if tau >= 1.0:
                self._target_flat.copy_(self._flat.data)
            else:
                self._target_flat.lerp_(self._flat.data, tau)
        if self.hp.use_kl_loss:  # RLlib's rule, on the mean KL since the last target update
            kl = self._kl_since_target / max(1, self.hp.target_network_update_freq)
            if kl > 2.0 * self.hp.kl_target:
                self.kl_coeff *= 1.5
            elif kl < 0.5 * self.hp.kl_target:
                self.kl_coeff *= 0.5
        self._kl_since_target = 0.0

    def update(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().update(*args, **kwargs)
        out["kl_coeff"] = self.kl_coeff
        return out

    # the target network and the KL coefficient travel with the rest of the state

    def state_tensors(self) -> list[torch.Tensor]:
        return [*super().state_tensors(), self._target_flat]

    def counters_tensor(self) -> torch.Tensor:
        return torch.cat([super().counters_tensor(),
                          torch.tensor([self.kl_coeff], dtype=torch.float64, device=self.device)])

    def set_counters(self, counters: torch.Tensor) -> None:
        super().set_counters(counters[:3])
        self.kl_coeff = float(counters[3])

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state["target_model"] = self._target_flat.detach().cpu().numpy().copy()
        state["kl_coeff"] = self.kl_coeff
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        target = state.get("target_model")
        with torch.no_grad():
            if target is not None and tuple(target.shape) == tuple(self._target_flat.shape):
                self._target_flat.copy_(torch.from_numpy(target))
            else:
                self._target_flat.copy_(self._flat.data)
        self.kl_coeff = float(state.get("kl_coeff", self.hp.kl_coeff))


class APPO(IMPALA):
    """APPO's driver: IMPALA's, with the APPO learner."""

    learner_class_path = "ftrl.rl.algorithms.appo:APPOLearner"
    learner_cls = APPOLearner
