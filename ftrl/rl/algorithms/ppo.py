"""PPO: sample synchronously from all env runners, learn on the batch, push weights."""

from __future__ import annotations

from typing import Any

from ftrl.rl.algorithm import Algorithm
from ftrl.rl.learner import PPOLearner


class PPO(Algorithm):
    """Proximal Policy Optimization (clipped surrogate, GAE) on a local torch learner."""

    def setup_learner(self) -> PPOLearner:
        return PPOLearner(self.config, self.spec)

    def training_iteration(self) -> dict[str, Any]:
        fragments = self.synchronous_parallel_sample(max_env_steps=self.config.training_cfg.train_batch_size)
        if not fragments:
            return {"learner": {"num_samples": 0, "weights_version": self.learner_version}}
        learn = self.learner.update(fragments, env_steps_sampled=self.env_steps_sampled)
        self.env_steps_trained += int(learn.get("num_samples", 0))
        self.sync_weights()
        return {"learner": learn}
