"""RunState: what the driver knows of its run, in one place with one owner (the
Algorithm). The driver state (`ftrl.rl.driver.state`) is made of it, a resume fills it
in, an exploit (`ftrl.rl.driver.exploit`) swaps its filter and episode window, and the
sampling bookkeeping records into it:

    run = RunState(config_dict=..., spec_dict=..., obs_filter=make_filter(...),
                   episodes=EpisodeWindow(100))
    run.begin_iteration()
    run.record_sample(result)          # episodes, filter delta, env step counters
    row = run.result_row(algo_result, iter_time, runner_stats, learner_stats)

It holds:

- the counters: iteration, env steps sampled and trained, the training time (`time_s`:
  `time_base`, continued across resumes, plus the time since `start_clock`), and this
  iteration's counts (`this_iter`);
- the central observation filter and the episode window;
- versions and incarnations: the incarnations of the actors in the state a resume
  started from (`saved_actors`), the weights version its filter was synced with
  (`filter_version`), the version of the last learner state handed to the state writer
  (`persisted_learner_version`); the runners' failure counters it held, applied once
  the runners exist (`saved_runner_counters`);
- the live hyperparameters set while the job ran (`hyperparams`) and the config as every
  state holds it (`config_dict`, with them), the space spec (`spec_dict`);
- the algorithm's own cumulative counters (`algo_counters`: IMPALA's stale and invalid
  samples); the user's callbacks' (`callback_counts`: hooks that raised, custom metric
  values and sub-env info values dropped, in every row) and what they logged this
  iteration outside episodes (`iteration_metrics`: driver hooks, `on_sample_end`);
- what the run wrote and reported: the newest iteration's row (`last_row`), rows a
  resume wrote and nobody reported yet (`rows_to_report`), where it resumed from
  (`restored_from`), its newest checkpoint and that checkpoint's summary.

Torch-free: the state functions read it in processes without torch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ftrl.rl.callbacks import Drops, MetricsLogger
from ftrl.rl.driver.metrics import EpisodeWindow

log = logging.getLogger(__name__)

#: the callbacks' cumulative counters, in every row and driver state
CALLBACK_COUNTS = ("num_callback_errors", "num_custom_metrics_dropped", "num_info_values_dropped")


class ObservationFilter(Protocol):
    """The central observation filter (ftrl.rl.sampling.filters)."""

    kind: str

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any] | None) -> None: ...

    def apply_delta(self, delta: dict[str, Any] | None) -> None: ...

    def affine(self) -> tuple[Any, Any, Any] | None: ...

    def __call__(self, x: Any, update: bool = True) -> Any: ...


@dataclass
class IterationCounts:
    """What the iteration in progress sampled so far."""

    env_steps: int = 0
    episodes: int = 0
    samples: int = 0


class RunState:
    """The run's counters, filter, episode window, versions and incarnations (module
    docstring). Every attribute is the run's; the parts read and write them here."""

    def __init__(self, *, config_dict: dict[str, Any], spec_dict: dict[str, Any], obs_filter: ObservationFilter,
                 episodes: EpisodeWindow, algo_counters: Iterable[str] = ()) -> None:
        self.config_dict = config_dict  # what every state holds (made again when a live key changes)
        self.spec_dict = spec_dict
        self.filter = obs_filter
        self.episodes = episodes
        # counters (checkpointed)
        self.iteration = 0
        self.env_steps_sampled = 0
        self.env_steps_trained = 0
        self.time_base = 0.0
        self._started_at: float | None = None
        self.this_iter = IterationCounts()
        #: an algorithm's own cumulative counters (kept in every driver state)
        self.algo_counters: dict[str, int] = dict.fromkeys(algo_counters, 0)
        #: the user's callbacks: hooks that raised, values dropped (runners' and the driver's)
        self.callback_counts: dict[str, int] = dict.fromkeys(CALLBACK_COUNTS, 0)
        #: values logged by driver hooks and `on_sample_end` since the last row
        self.iteration_metrics = MetricsLogger(Drops("driver"))
        #: live training keys set while the job runs (exploits), kept in every driver state
        self.hyperparams: dict[str, Any] = {}
        # versions and incarnations
        self.saved_runner_counters: dict[str, Any] = {}
        self.saved_actors: dict[str, Any] = {}  # incarnations in the resumed state, by group
        self.filter_version = -1  # the weights version the resumed state's filter was synced with
        self.persisted_learner_version = -1  # of the last learner state handed to the writer
        # what the run wrote and reported
        self.restored_from: Path | None = None
        #: how many times this run resumed from a state (a restarted driver, `--resume`), in every row
        self.num_driver_resumes = 0
        self.last_row: dict[str, Any] | None = None  # the metrics row of the newest iteration
        self.rows_to_report: list[dict[str, Any]] = []  # written by the resume, not reported yet
        self.last_checkpoint: Path | None = None  # written by this run
        self.last_checkpoint_summary: dict[str, Any] | None = None  # of last_checkpoint (checkpoint_summary)
        self.last_checkpoint_iteration = -1

    # ------------------------------------------------------------------ time

    def start_clock(self) -> None:
        """Training time counts from now on (setup excluded)."""
        self._started_at = time.monotonic()

    @property
    def time_s(self) -> float:
        """Training wall time, continued across resumes (setup excluded)."""
        if self._started_at is None:
            return self.time_base
        return self.time_base + (time.monotonic() - self._started_at)

    # ------------------------------------------------------------------ one iteration

    def begin_iteration(self) -> None:
        """This iteration's counts start at zero."""
        self.this_iter = IterationCounts()

    def record_sample(self, result: dict[str, Any]) -> None:
        """Bookkeeping for one sample result (a runner's `sample()`): env steps, episodes,
        the filter's delta (a bad one is logged and ignored)."""
        steps = int(result.get("env_steps", 0))
        self.env_steps_sampled += steps
        self.this_iter.env_steps += steps
        self.this_iter.samples += 1
        eps = result.get("episodes") or {}
        self.this_iter.episodes += self.episodes.add(eps.get("returns", []), eps.get("lengths", []),
                                                     eps.get("custom"))
        if "callback_counts" in result or "sample_metrics" in result:
            self._record_callbacks(result)
        delta = result.get("filter_delta")
        if delta is not None:
            try:
                self.filter.apply_delta(delta)
            except ValueError as e:
                log.warning("ignoring a filter delta from runner %s: %s", result.get("worker_index"), e)

    def _record_callbacks(self, result: dict[str, Any]) -> None:
        """A sample's callback counts (since its runner's last sample) and `on_sample_end`
        values ({name: [value, reduce]}, logged on into this iteration's values)."""
        for key, n in (result.get("callback_counts") or {}).items():
            if key in self.callback_counts and isinstance(n, int):
                self.callback_counts[key] += n
        for name, entry in (result.get("sample_metrics") or {}).items():
            if isinstance(entry, (list, tuple)) and len(entry) == 2:
                self.iteration_metrics.log_value(name, entry[0], reduce=entry[1])

    def close_iteration_metrics(self, result: dict[str, Any]) -> None:
        """Into `result`: the values logged this iteration outside episodes, as
        `custom_metrics[NAME]` (the logger emptied), and the callback counters."""
        result.setdefault("custom_metrics", {}).update(self.iteration_metrics.reduce_all())
        drops = self.iteration_metrics.drops
        self.callback_counts["num_custom_metrics_dropped"] += drops.count
        drops.count = 0
        result.update(self.callback_counts)

    def result_row(self, algo_result: dict[str, Any], iter_time: float, runner_stats: dict[str, Any],
                   learner_stats: dict[str, Any]) -> dict[str, Any]:
        """The result of the iteration just counted (`iteration` already moved on): the
        run's figures, the runners' and learners', then the algorithm's own keys."""
        result: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps_sampled": self.env_steps_sampled,
            "env_steps_sampled_this_iter": self.this_iter.env_steps,
            "env_steps_trained": self.env_steps_trained,
            "episodes_total": self.episodes.episodes_total,
            "episodes_this_iter": self.this_iter.episodes,
            **self.episodes.stats(),
            "custom_metrics": {**self.episodes.custom_stats(), **self.iteration_metrics.peek()},
            "num_driver_resumes": self.num_driver_resumes,
            **runner_stats,
            **learner_stats,
            "time_s": self.time_s,
            "time_this_iter_s": iter_time,
            "timestamp": time.time(),
        }
        for key, value in algo_result.items():
            result.setdefault(key, value)
        return result

    def progress(self) -> dict[str, Any]:
        """What the stop criteria see before the first iteration (e.g. after a resume)."""
        return {
            "iteration": self.iteration,
            "env_steps_sampled": self.env_steps_sampled,
            "episode_return_mean": self.episodes.stats()["episode_return_mean"],
        }

    def newest_row(self) -> dict[str, Any] | None:
        """The row of the current iteration, if this run made or read one."""
        row = self.last_row
        return row if row is not None and row.get("iteration") == self.iteration else None
