"""Evaluation: `evaluation_duration` episodes (or timesteps) with given weights, on the
evaluation runners (a remote group, split over its healthy runners) or on a local
evaluation runner (`Algorithm.evaluate`).

    ev = evaluate(runners, config.evaluation_cfg, version, weights, filter_state)
    ev["episode_return_mean"], ev["num_episodes"], ev["weights_version"]
    ev["custom_metrics"]    # NAME_mean/min/max over the evaluated episodes (user callbacks)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ftrl.config import EvaluationConfig
from ftrl.rl.driver.metrics import EpisodeWindow
from ftrl.rl.driver.runners import DriverRunners


def evaluate(runners: DriverRunners, ev: EvaluationConfig, version: int, weights: np.ndarray,
             filter_state: dict[str, Any], record_video: bool = False) -> dict[str, Any]:
    """Evaluate weights `version` (with the central filter's state) as `ev` says; returns
    the episodes' statistics, the env steps, the version and the time it took (a group:
    its health and failure counters too, as eval_*). `record_video`: one runner records
    one episode; its MP4 comes back in "video" ({"mp4", "length", "return", "fps"})."""
    results: list[dict[str, Any]] = []
    t0 = time.monotonic()
    healthy = 0
    group = runners.eval_group
    if group is not None:
        group.poll_recoveries()
        group.sync_weights(version, weights, filter_state)
        results = group.evaluate(ev.evaluation_duration, ev.evaluation_duration_unit, record_video)
        healthy = group.num_healthy
    else:
        runner = runners.eval_runner()
        runner.set_weights(version, weights, filter_state)
        kwargs = ({"num_episodes": ev.evaluation_duration} if ev.evaluation_duration_unit == "episodes"
                  else {"num_timesteps": ev.evaluation_duration})
        results = [runner.evaluate(**kwargs, record_video=record_video)]
    # every evaluated episode in one window: returns, lengths and custom values, as training's
    episodes = EpisodeWindow(max(1, sum(len(r.get("returns", ())) for r in results)))
    for r in results:
        episodes.add(r.get("returns", ()), r.get("lengths", ()), r.get("custom"))
    out = {
        **episodes.stats(),
        "num_episodes": episodes.episodes_total,
        "custom_metrics": episodes.custom_stats(),
        "env_steps": int(sum(int(r.get("env_steps", 0)) for r in results)),
        "weights_version": version,
        "time_s": time.monotonic() - t0,
    }
    video = next((r["video"] for r in results if isinstance(r.get("video"), dict)), None)
    if video is not None:
        out["video"] = video
    if group is not None:
        out["num_healthy_eval_runners"] = healthy
        out.update({f"eval_{k}": v for k, v in group.stats().items() if k != "num_healthy_eval_runners"})
    return out


def video_due(ev: EvaluationConfig, iteration: int) -> bool:
    """Whether the evaluation at `iteration` records a video: the 1st evaluation, then
    every `evaluation_video_interval`-th."""
    every, interval = ev.evaluation_video_interval, ev.evaluation_interval
    if every <= 0 or not interval:
        return False
    return (iteration // interval - 1) % every == 0

