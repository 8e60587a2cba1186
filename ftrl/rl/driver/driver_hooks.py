"""The driver's side of a user's callbacks (`callbacks_class`, ftrl.rl.callbacks):
`on_algorithm_init`, `on_train_result`, `on_evaluate_end`, `on_checkpoint_loaded`,
`on_algorithm_end`.

    hooks = DriverHooks(config.callbacks_cfg.callbacks_class, run_state)  # ConfigError first
    hooks.algorithm_init(algo)
    hooks.train_result(algo, result)   # what the hook changes in `result` is the row

What a hook logs (`metrics_logger.log_value`) goes to this iteration's values
(`RunState.iteration_metrics`), which the row carries as `custom_metrics[NAME]`. A hook
that raises is logged once (with its traceback) and counted in the run's
`num_callback_errors`; the iteration goes on. A restarted driver builds its callbacks
again (a new instance: nothing of the old one's attributes survives).
"""

from __future__ import annotations

from typing import Any

from ftrl.rl.callbacks import HookCaller, build_callbacks
from ftrl.rl.driver.run_state import RunState


class DriverHooks:
    """The user's driver hooks for one run (none when `callbacks_class` is None)."""

    def __init__(self, callbacks_class: str | None, run: RunState) -> None:
        callbacks = build_callbacks(callbacks_class)
        self.run = run
        self.caller = HookCaller(callbacks, "driver") if callbacks is not None else None

    def _call(self, hook: str, **kwargs: Any) -> None:
        caller = self.caller
        if caller is None or hook not in caller:
            return
        logger = self.run.iteration_metrics
        if not caller.call(hook, metrics_logger=logger, **kwargs):
            self.run.callback_counts["num_callback_errors"] += 1

    def algorithm_init(self, algorithm: Any) -> None:
        self._call("on_algorithm_init", algorithm=algorithm)

    def checkpoint_loaded(self, algorithm: Any) -> None:
        self._call("on_checkpoint_loaded", algorithm=algorithm)

    def evaluate_end(self, algorithm: Any, evaluation_metrics: dict[str, Any]) -> None:
        self._call("on_evaluate_end", algorithm=algorithm, evaluation_metrics=evaluation_metrics)

    def algorithm_end(self, algorithm: Any, reason: str) -> None:
        self._call("on_algorithm_end", algorithm=algorithm, reason=reason)

    def train_result(self, algorithm: Any, result: dict[str, Any]) -> None:
        """`on_train_result`, then what was logged this iteration into the result's
        `custom_metrics` (and the drop counter)."""
        self._call("on_train_result", algorithm=algorithm, result=result)
        self.run.close_iteration_metrics(result)
