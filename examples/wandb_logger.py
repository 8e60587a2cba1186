"""A logger hook: every metrics row to Weights & Biases (offline by default).

    PYTHONPATH=. ftrl train --config examples/cartpole_ppo.toml --output runs/wb \
        --set callbacks_class=examples.wandb_logger:WandbLogger

User code is named by import path: every process of the run must import it, so the
repository root goes on PYTHONPATH (or install the module). `WANDB_MODE=online` (and `wandb login`) sends the run to
the W&B server; by default it stays in `OUTPUT/wandb/` (`wandb sync` uploads it later).
The same shape works for MLflow: `mlflow.log_metrics(flat, step=...)` in `on_train_result`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import ftrl


def flat(row: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """(key, number) of a row, nested keys as "/" paths."""
    for key, value in row.items():
        if isinstance(value, Mapping):
            yield from flat(value, f"{prefix}{key}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield f"{prefix}{key}", value


class WandbLogger(ftrl.Callbacks):
    """One W&B run per ftrl run (a restarted driver resumes it: the run id is the output dir's)."""

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        import wandb

        out = str(algorithm.output_dir or ".")
        run_id = "ftrl-" + os.path.basename(os.path.abspath(out)).replace("/", "-")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "ftrl"), id=run_id, resume="allow", dir=out,
                              mode=os.environ.get("WANDB_MODE", "offline"), config=algorithm.config.to_dict())

    def on_train_result(self, *, result: Any, **kwargs: Any) -> None:
        self.run.log(dict(flat(result)), step=int(result["env_steps_sampled"]))

    def on_algorithm_end(self, **kwargs: Any) -> None:
        self.run.finish()
