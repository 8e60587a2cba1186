"""PPO: sample synchronously from all env runners, learn on the batch, push weights.

One training iteration, top to bottom:

    fragments = sample(train_batch_size env steps)   # every healthy runner, current weights
    learner.update(fragments)                        # GAE + clipped-surrogate SGD epochs
    sync_weights()                                   # new version + filter -> the runners

The learner (ftrl.rl.learning.learner.PPOLearner) is in this process (`num_learners=0`) or a
data-parallel LearnerGroup of learner actors; `self.learner` is the same interface
either way. Everything around an iteration (setup, episode and metrics bookkeeping,
evaluation, checkpoints, running to a stop) is the base class's: ftrl.rl.driver.algorithm,
ftrl.rl.driver.run_loop, ftrl.rl.driver.state.
"""

from __future__ import annotations

import time
from typing import Any

from ftrl.rl.driver.algorithm import Algorithm
from ftrl.rl.learning.learner import PPOLearner


class PPO(Algorithm):
    """Proximal Policy Optimization (clipped surrogate, GAE) on a local torch learner or
    on the elastic learner group (`num_learners > 0`)."""

    #: What each learner actor hosts when `num_learners > 0`.
    learner_class_path = "ftrl.rl.learning.learner:PPOLearner"

    def setup_learner(self) -> PPOLearner:
        """The in-process learner (`num_learners=0`)."""
        return PPOLearner(self.config, self.spec)

    def training_iteration(self) -> dict[str, Any]:
        """Sample -> learn -> sync weights; returns the learner's metrics and timers."""
        # 1. sample: at least train_batch_size env steps (or what sample_timeout_s allowed)
        t0 = time.perf_counter()
        fragments = self.synchronous_parallel_sample(max_env_steps=self.config.training_cfg.train_batch_size)
        t1 = time.perf_counter()
        if not fragments:  # every runner failed or was late: nothing to learn on
            return {
                "learner": {"num_samples": 0, "weights_version": self.learner_version},
                "timers": {"sample_s": t1 - t0, "learn_s": 0.0, "sync_weights_s": 0.0},
            }
        # 2. learn: SGD epochs on the batch; the weights version goes up by one
        learn = self.learner.update(fragments, env_steps_sampled=self.env_steps_sampled)
        self.env_steps_trained += int(learn.get("num_samples", 0))
        t2 = time.perf_counter()
        # 3. sync weights: the new version (and the observation filter) to the runners
        self.sync_weights()
        t3 = time.perf_counter()
        return {"learner": learn, "timers": {"sample_s": t1 - t0, "learn_s": t2 - t1, "sync_weights_s": t3 - t2}}
