"""IMPALA's config (Espeholt et al. 2018): its training section and its builder,
torch-free. The algorithm, and the math these keys drive, is ftrl/rl/algorithms/impala.py.

Key names are RLlib's where RLlib has them (`vtrace`, `vtrace_clip_rho_threshold`,
`vtrace_clip_pg_rho_threshold`, `learner_queue_size`, `broadcast_interval`,
`opt_type`, `decay`, `momentum`, `epsilon`); `max_policy_lag` is Sample Factory's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftrl.config.builder import AlgorithmConfig
from ftrl.config.fields import (
    check_schedule,
    keys_of,
    non_negative_float,
    one_of,
    option,
    positive_float,
    positive_int,
    unit_interval,
)
from ftrl.config.keys import LIVE, NEVER, Part, rebuild
from ftrl.config.sections import TrainingConfig
from ftrl.wire.errors import ConfigError


@dataclass
class IMPALATrainingConfig(TrainingConfig):
    """IMPALA's hyperparameters, besides the shared lr, gamma, train_batch_size, grad_clip, model
    (lr, train_batch_size and grad_clip get other defaults here and keep their facts)."""

    lr: float = option(5e-4, "learning rate", check=positive_float)
    train_batch_size: int = option(
        500, "env steps per learner update (the batch the learner takes off its queue)", check=positive_int
    )
    grad_clip: float | None = option(40.0, "max global gradient norm (None: no clip)", check=positive_float)
    lr_schedule: list | None = option(  # noqa: RUF009
        None, "[[env_step, lr], ...], linear in between, held after the last (None: constant lr)",
        check=check_schedule, change=LIVE, schedules="lr",
    )
    num_epochs: int = option(1, "passes over each train batch", check=positive_int, change=LIVE)
    minibatch_size: int | None = option(
        None, "env steps per gradient step, in whole env columns of the batch (None: the whole batch)",
        check=positive_int, change=LIVE,
    )
    vtrace: bool = option(True, "V-trace off-policy correction (False: plain n-step returns, no importance weights)",
                          change=LIVE)
    vtrace_clip_rho_threshold: float = option(1.0, "rho-bar: clip of the importance weights in the value targets",
                                              check=positive_float, change=LIVE)
    vtrace_clip_pg_rho_threshold: float = option(1.0, "clip of the importance weights in the policy-gradient "
                                                 "advantages", check=positive_float, change=LIVE)
    vf_loss_coeff: float = option(0.5, "weight of the value loss", check=non_negative_float, change=LIVE)
    entropy_coeff: float = option(0.01, "weight of the entropy bonus", check=non_negative_float, change=LIVE)
    # the learner thread's keys are the driver's: the learners never read them (mesh=False)
    learner_queue_size: int = option(
        3, "train batches waiting for the learner at most; runners wait when it is full (back-pressure)",
        check=positive_int, change=rebuild(Part.LEARNER_THREAD), mesh=False,
    )
    broadcast_interval: int = option(
        1, "learner updates between two weights broadcasts to the runners", check=positive_int,
        change=rebuild(Part.LEARNER_THREAD), mesh=False,
    )
    max_policy_lag: int = option(
        20, "use a sample only if the learner moved at most this many updates past its weights "
        "(older ones are dropped and counted)", check=positive_int,
        change=rebuild(Part.LEARNER_THREAD, Part.DRIVER), mesh=False,
    )
    opt_type: str = option(
        "adam", "optimizer: adam, rmsprop (torch's: epsilon added outside the square root) or rmsprop_tf "
        "(TensorFlow's, as the IMPALA paper and RLlib's TF IMPALA: epsilon inside the square root, the "
        "squared-gradient average starting at 1; an epsilon taken from a TF config means this form)",
        check=one_of("adam", "rmsprop", "rmsprop_tf"),
        change=NEVER, fixed_on_resume=True,  # the optimizer state of one type does not load into the other
    )
    decay: float = option(0.99, "rmsprop: decay of the squared-gradient average", check=unit_interval,
                          change=LIVE)
    momentum: float = option(0.0, "rmsprop: momentum", check=unit_interval, change=LIVE)
    epsilon: float = option(1e-7, "optimizer epsilon (Adam's and RMSProp's; see opt_type for where RMSProp "
                            "adds it)", check=positive_float, change=LIVE)
    loss_reduction: str = option(
        "mean", "the loss over a batch's steps: mean, or sum (as RLlib's TF IMPALA and the IMPALA paper's agent: "
        "gradients, the clip and an optimizer epsilon then act on the sum, so their epsilon and grad_clip "
        "mean what they meant there)", check=one_of("mean", "sum"), change=LIVE,
    )
    deterministic: bool = option(
        False, "a policy lag of exactly 1 (as Cleanba): every update learns on one fragment of each runner "
        "sampled with the weights before the last update, in runner order; a run reproduces bit for bit "
        "from its seed (as long as no runner fails)",
        change=NEVER, mesh=False,  # which sampling pipeline the driver runs: fixed for a trial
    )


class IMPALAConfig(AlgorithmConfig):
    """IMPALA config builder: `IMPALAConfig().environment("CartPole-v1").training(lr=5e-4).build()`."""

    algo_name = "IMPALA"
    training_cls = IMPALATrainingConfig
    algorithm_path = "ftrl.rl.algorithms.impala:IMPALA"

    @keys_of(IMPALATrainingConfig)
    def training(self, **kwargs: Any) -> IMPALAConfig:
        """IMPALA hyperparameters (RLlib's names)."""
        return self._set("training", kwargs)

    def _validate_training(self) -> None:
        check_async_training(self)


def check_async_training(config: AlgorithmConfig) -> None:
    """Checks across keys for the asynchronous actor-learner family (IMPALA, APPO)."""
    t = config.training_cfg
    run = config.env_runners_cfg
    if t.minibatch_size is not None and t.minibatch_size > t.train_batch_size:
        raise ConfigError(f"minibatch_size ({t.minibatch_size}) must not exceed train_batch_size "
                          f"({t.train_batch_size})")
    if t.deterministic and run.num_env_runners == 0:
        raise ConfigError("deterministic=True pipelines sampling on env runners with learning: "
                          "set num_env_runners >= 1")
