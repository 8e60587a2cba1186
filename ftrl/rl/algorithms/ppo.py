"""PPO: sample synchronously from all env runners, learn on the batch, push weights."""

from __future__ import annotations

import time
from typing import Any

from ftrl.rl.algorithm import Algorithm
from ftrl.rl.learner import PPOLearner


class PPO(Algorithm):
    """Proximal Policy Optimization (clipped surrogate, GAE) on a local torch learner."""

    def setup_learner(self) -> PPOLearner:
        return PPOLearner(self.config, self.spec)

    def training_iteration(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        fragments = self.synchronous_parallel_sample(max_env_steps=self.config.training_cfg.train_batch_size)
        t1 = time.perf_counter()
        if not fragments:
            return {
                "learner": {"num_samples": 0, "weights_version": self.learner_version},
                "timers": {"sample_s": t1 - t0, "learn_s": 0.0, "sync_weights_s": 0.0},
            }
        learn = self.learner.update(fragments, env_steps_sampled=self.env_steps_sampled)
        self.env_steps_trained += int(learn.get("num_samples", 0))
        t2 = time.perf_counter()
        self.sync_weights()
        t3 = time.perf_counter()
        return {"learner": learn, "timers": {"sample_s": t1 - t0, "learn_s": t2 - t1, "sync_weights_s": t3 - t2}}
