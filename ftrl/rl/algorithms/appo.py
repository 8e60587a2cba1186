"""APPO: IMPALA's asynchronous data path and V-trace, with PPO's clipped surrogate
against a target network (as RLlib's APPO). Top to bottom:

    config        APPOConfig / APPOTrainingConfig (ftrl/config/appo.py: torch-free)
    the loss terms of its own, beside IMPALA's (ftrl/rl/algorithms/impala.py: V-trace,
                  the value and entropy terms): `clipped_surrogate_term`, `kl_term`
    appo_loss     the clipped surrogate on V-trace advantages, the value loss, the
                  entropy bonus and (use_kl_loss) the KL to the target policy
    APPOLearner   IMPALA's learner plus the target network (and the adaptive KL coefficient)
    APPO          IMPALA's driver with this learner

Reading APPO whole takes three files: this one, impala.py (the shared loss terms, the
learner's update loop, the driver's data path) and ftrl/rl/driver/async_learner.py
(the learner thread).

The target network is the learner's policy of a few updates ago: updated every
`target_network_update_freq` updates as target = tau * current + (1 - tau) * target.
V-trace corrects from the behaviour policy (the runners') to the target policy; the
surrogate's ratio is pi / pi_target, computed as mu / pi_target clipped to [0, 2] times
pi / mu (RLlib's). The KL term is estimated on the batch's actions
(E[(r - 1) - log r], r = pi / pi_target).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ftrl.config.appo import APPOConfig, APPOTrainingConfig
from ftrl.rl.algorithms.impala import (
    IMPALA,
    IMPALALearner,
    entropy_term,
    evaluate_time_major,
    value_term,
    vtrace_targets,
)

__all__ = ["APPO", "APPOConfig", "APPOLearner", "APPOTrainingConfig", "appo_loss", "clipped_surrogate_term",
           "kl_term"]


def clipped_surrogate_term(logp: torch.Tensor, behaviour_logp: torch.Tensor, target_logp: torch.Tensor,
                           advantages: torch.Tensor, mask: torch.Tensor,
                           clip_param: float) -> tuple[torch.Tensor, torch.Tensor]:
    """-min(r A, clip(r, 1 - eps, 1 + eps) A) summed over the valid steps, with
    r = pi / pi_target, computed as (mu / pi_target clipped to [0, 2]) * (pi / mu) (RLlib's:
    a stale behaviour policy mu far below the target caps r); and how many valid steps had r
    outside [1 - eps, 1 + eps] (not differentiated)."""
    is_ratio = torch.exp(behaviour_logp - target_logp).clamp(0.0, 2.0)
    ratio = is_ratio * torch.exp(logp - behaviour_logp)
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip_param, 1.0 + clip_param) * advantages)
    with torch.no_grad():
        clipped = (((ratio - 1.0).abs() > clip_param).to(mask.dtype) * mask).sum()
    return -(surrogate * mask).sum(), clipped


def kl_term(logp: torch.Tensor, target_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(pi_target || pi) estimated on the batch's actions, E[(r - 1) - log r] with
    r = pi / pi_target, summed over the valid steps."""
    log_r = logp - target_logp
    return (((log_r.exp() - 1.0) - log_r) * mask).sum()


def appo_loss(model: torch.nn.Module, target_model: torch.nn.Module | None, batch: dict[str, torch.Tensor],
              hp: APPOTrainingConfig, kl_coeff: float) -> tuple[torch.Tensor, dict[str, Any]]:
    """APPO's loss of one [T, B] batch, summed over valid steps: the clipped surrogate on
    V-trace advantages (corrected to the target policy) + vf_loss_coeff * the value term
    - entropy_coeff * the entropy term (+ kl_coeff * the KL term); and its statistics.
    `target_model` None: the target has the model's weights (just copied), so its
    log-probabilities are the model's own, without a second forward pass."""
    logp, entropy, values = evaluate_time_major(model, batch)
    with torch.no_grad():
        target_logp = logp.detach() if target_model is None else evaluate_time_major(target_model, batch)[0]
        vs, pg_adv = vtrace_targets(batch, values.detach(), target_logp, hp)
    mask = batch["valid"].to(values.dtype)
    vf_loss = value_term(values, vs, mask)
    entropy_sum = entropy_term(entropy, mask)
    policy_loss, clipped = clipped_surrogate_term(logp, batch["logp"], target_logp, pg_adv, mask, hp.clip_param)
    kl = kl_term(logp, target_logp, mask)
    loss = policy_loss + hp.vf_loss_coeff * vf_loss - hp.entropy_coeff * entropy_sum
    if hp.use_kl_loss:
        loss = loss + kl_coeff * kl
    return loss, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(), "entropy": entropy_sum.detach(),
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
        self._kl_since_target = [0.0, 0.0]  # the KL summed over the valid steps, and their count
        # a model whose forward is the same in train mode (no dropout, no batch norm) with
        # the target's weights gives the target's log-probabilities itself
        train_mode_differs = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm)
        self._forward_is_pure = not any(isinstance(m, train_mode_differs) for m in self.model.modules())

    def _target_views(self) -> None:
        """Make the target parameters views of one flat tensor (one copy per update)."""
        offset = 0
        for p in self.target_model.parameters():
            n = p.numel()
            p.data = self._target_flat[offset : offset + n].view_as(p)
            offset += n

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        same = self._forward_is_pure and torch.equal(self._target_flat, self._flat.data)
        loss, stats = appo_loss(self.model, None if same else self.target_model, batch, self.hp, self.kl_coeff)
        self._kl_since_target[0] += float(stats["kl"])
        self._kl_since_target[1] += float(batch["valid"].sum())
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
        if self.hp.use_kl_loss:  # RLlib's rule, on the mean KL a step since the last target update
            kl = self._mean_kl_since_target()
            if kl > 2.0 * self.hp.kl_target:
                self.kl_coeff *= 1.5
            elif kl < 0.5 * self.hp.kl_target:
                self.kl_coeff *= 0.5
        self._kl_since_target = [0.0, 0.0]

    def _mean_kl_since_target(self) -> float:
        """The KL per valid step since the last target update: over every rank's steps in
        a learner mesh (every rank calls this at the same update), so all adapt alike."""
        kl_sum, steps = self._kl_since_target
        if self.allreduce is not None:
            both = torch.tensor([kl_sum, steps], dtype=torch.float64, device=self.device)
            self.allreduce(both)
            kl_sum, steps = float(both[0]), float(both[1])
        return kl_sum / steps if steps > 0 else 0.0

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
