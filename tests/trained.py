"""A short in-process training run that leaves a checkpoint, for the tests that load,
watch or resume one."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def train_and_checkpoint(config: Any, output_dir: Path, iterations: int = 1) -> list[dict[str, Any]]:
    """Build `config`'s algorithm on `output_dir`, train `iterations` times, checkpoint,
    wait for its state and rows on disk, stop it; the iterations' results."""
    algo = config.build(output_dir=output_dir)
    try:
        results = [algo.train() for _ in range(iterations)]
        algo.save_checkpoint()
        algo.flush_state()
    finally:
        algo.stop()
    return results
