"""Callbacks for tests and examples (import paths usable as `callbacks_class`).

    ftrl.testing.callbacks:PoleAngle        the largest |pole angle| of each episode, from
                                              the env's info (ftrl.testing.envs:make_info_env)
                                              as `pole_angle_max` (reduce "max"); the episode's
                                              length as `steps`; the runner's pid as `pid`;
                                              each finished episode appended to the file
                                              env_config["episode_log"] names, if any
    ftrl.testing.callbacks:NegativeReturn   `neg_return` = -return and `neg_lr` = -lr (metrics
                                              to rank by that prefer the worse policy)
    ftrl.testing.callbacks:Raising          on_episode_end raises for every other episode;
                                              on_train_result raises every iteration
"""

from __future__ import annotations

import os
from typing import Any

from ftrl.rl.callbacks import Callbacks


class PoleAngle(Callbacks):
    """Custom metrics from the env's info (module docstring)."""

    def on_episode_start(self, *, episode: Any, **kwargs: Any) -> None:
        episode.custom_data["angles"] = 0

    def on_episode_step(self, *, episode: Any, metrics_logger: Any, **kwargs: Any) -> None:
        info = episode.get_infos(-1)
        episode.custom_data["angles"] += 1
        metrics_logger.log_value("pole_angle_max", info["pole_angle"], reduce="max")

    def on_episode_end(self, *, episode: Any, metrics_logger: Any, env_runner: Any, **kwargs: Any) -> None:
        info = episode.get_infos(-1)
        metrics_logger.log_value("pole_angle_max", info["pole_angle"], reduce="max")
        metrics_logger.log_value("steps", len(episode))
        metrics_logger.log_value("pid", info["pid"])
        path = env_runner.env_config.get("episode_log")
        if path:
            with open(path, "a") as f:
                f.write(f"{os.getpid()} {episode.id_} {len(episode)} {episode.get_return()}\n")


class NegativeReturn(Callbacks):
    """`neg_return` = -(the episode's return); `neg_lr` = -(the lr the runner was built
    with): a metric that ranks a trial by its starting lr, the lower the better."""

    def on_episode_end(self, *, episode: Any, metrics_logger: Any, env_runner: Any, **kwargs: Any) -> None:
        metrics_logger.log_value("neg_return", -episode.get_return())
        metrics_logger.log_value("neg_lr", -float(env_runner.config.lr))


class Raising(Callbacks):
    """A buggy user's callbacks (module docstring)."""

    def on_episode_end(self, *, episode: Any, metrics_logger: Any, **kwargs: Any) -> None:
        metrics_logger.log_value("kept", 1.0)
        if episode.id_ % 2:
            raise ValueError(f"a bug in the user's callback (episode {episode.id_})")

    def on_train_result(self, *, result: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in on_train_result")
