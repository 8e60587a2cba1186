"""APPO's config (IMPALA with PPO's clipped surrogate and a target network, as RLlib's
APPO): its training section and its builder, torch-free. The algorithm is
ftrl/rl/algorithms/appo.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftrl.config.fields import (
    keys_of,
    non_negative_float,
    option,
    positive_float,
    positive_int,
    unit_interval,
)
from ftrl.config.impala import IMPALAConfig, IMPALATrainingConfig, check_async_training
from ftrl.config.keys import LIVE, NEVER


@dataclass
class APPOTrainingConfig(IMPALATrainingConfig):
    """APPO's hyperparameters: IMPALA's, plus the surrogate clip, the target network and
    the (optional) KL loss against it."""

    clip_param: float = option(0.4, "PPO policy ratio clip (against the target network)", check=positive_float,
                               change=LIVE)
    use_kl_loss: bool = option(False, "add kl_coeff * KL(target policy || policy) to the loss", change=LIVE)
    kl_coeff: float = option(
        1.0, "initial weight of the KL loss", check=non_negative_float,
        change=NEVER,  # read as the learners start; the adapted weight is learner state (checkpointed)
    )
    kl_target: float = option(0.01, "the KL the coefficient is tuned towards", check=positive_float, change=LIVE)
    target_network_update_freq: int = option(
        2, "learner updates between two updates of the target network", check=positive_int, change=LIVE
    )
    tau: float = option(1.0, "target network update: target = tau * current + (1 - tau) * target",
                        check=unit_interval, change=LIVE)


class APPOConfig(IMPALAConfig):
    """APPO config builder: `APPOConfig().environment("CartPole-v1").training(clip_param=0.4).build()`."""

    algo_name = "APPO"
    training_cls = APPOTrainingConfig
    algorithm_path = "ftrl.rl.algorithms.appo:APPO"

    @keys_of(APPOTrainingConfig)
    def training(self, **kwargs: Any) -> APPOConfig:
        """APPO hyperparameters (RLlib's names)."""
        return self._set("training", kwargs)

    def _validate_training(self) -> None:
        check_async_training(self)
