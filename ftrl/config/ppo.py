"""PPO's config: its training section and its builder, torch-free (the SDK, the client
and the coordinator read configs without loading torch). The algorithm itself, and the
math these keys drive, is ftrl/rl/algorithms/ppo.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftrl.config.builder import AlgorithmConfig
from ftrl.config.fields import (
    check_schedule,
    keys_of,
    non_negative_float,
    option,
    positive_float,
    positive_int,
    unit_interval,
)
from ftrl.config.keys import LIVE, NEVER
from ftrl.config.sections import TrainingConfig
from ftrl.wire.errors import ConfigError


@dataclass
class PPOTrainingConfig(TrainingConfig):
    """PPO's hyperparameters, besides the shared lr, gamma, train_batch_size, grad_clip, model."""

    lr_schedule: list | None = option(  # noqa: RUF009
        None, "[[env_step, lr], ...], linear in between, held after the last (None: constant lr)",
        check=check_schedule, change=LIVE, schedules="lr",
    )
    lambda_: float = option(0.95, "GAE lambda", check=unit_interval, change=LIVE)
    use_gae: bool = option(True, "generalized advantage estimation (else plain returns minus value)", change=LIVE)
    minibatch_size: int = option(128, "steps per SGD minibatch", check=positive_int, change=LIVE)
    num_epochs: int = option(10, "passes over each train batch", check=positive_int, change=LIVE)
    clip_param: float = option(0.2, "PPO policy ratio clip", check=positive_float, change=LIVE)
    clip_param_schedule: list | None = option(  # noqa: RUF009
        None, "[[env_step, clip_param], ...] like lr_schedule (None: constant)", check=check_schedule,
        change=LIVE, schedules="clip_param",
    )
    vf_loss_coeff: float = option(0.5, "weight of the value loss", check=non_negative_float, change=LIVE)
    vf_clip_param: float | None = option(
        None, "clip of the value-function update (None: no clip)", check=positive_float, change=LIVE
    )
    entropy_coeff: float = option(0.0, "weight of the entropy bonus", check=non_negative_float, change=LIVE)
    use_kl_loss: bool = option(
        False, "add kl_coeff * KL(sampling policy || policy) to the loss (RLlib's default is on)", change=LIVE
    )
    kl_coeff: float = option(
        0.2, "initial weight of the KL loss", check=non_negative_float,
        change=NEVER,  # read as the learners start; the adapted weight is learner state (checkpointed)
    )
    kl_target: float = option(0.01, "the KL the coefficient is tuned towards", check=positive_float, change=LIVE)
    normalize_advantages: bool = option(True, "normalize advantages per minibatch", change=LIVE)
    adam_epsilon: float = option(1e-5, "Adam epsilon", check=positive_float, change=LIVE)


class PPOConfig(AlgorithmConfig):
    """PPO config builder: `PPOConfig().environment("CartPole-v1").training(lr=1e-3).build()`."""

    algo_name = "PPO"
    training_cls = PPOTrainingConfig
    algorithm_path = "ftrl.rl.algorithms.ppo:PPO"

    @keys_of(PPOTrainingConfig)
    def training(self, **kwargs: Any) -> PPOConfig:
        """PPO hyperparameters. Schedules are RLlib-style [[env_step, value], ...] lists,
        interpolated linearly and held after the last point."""
        return self._set("training", kwargs)

    def _validate_training(self) -> None:
        t = self.training_cfg
        if t.minibatch_size > t.train_batch_size:
            raise ConfigError(
                f"minibatch_size ({t.minibatch_size}) must not exceed train_batch_size "
                f"({t.train_batch_size})"
            )
