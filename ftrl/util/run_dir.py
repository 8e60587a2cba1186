"""What a training run keeps in its output directory, named once for every room that
looks at it: the driver writes it (ftrl.rl.driver.state_writer, ftrl.rl.driver.checkpoint), and
`ftrl train` and the coordinator refuse a fresh run over it (it would be overwritten).
Imports nothing: the coordinator uses it without the RL room."""

from __future__ import annotations

from pathlib import Path

#: The driver's newest per-iteration state (ftrl.rl.driver.state_writer).
DRIVER_STATE_FILE = "driver_state.ftrl"
#: The learner's state beside it.
LEARNER_STATE_FILE = "learner_state.ftrl"
#: Checkpoints: checkpoint_<iteration>.ftrl files in this subdirectory (ftrl.rl.driver.checkpoint).
CHECKPOINT_DIR = "checkpoints"


def has_saved_state(output_dir: str | Path) -> bool:
    """Whether `output_dir` holds a run's state (a driver state or a checkpoint file)."""
    out = Path(output_dir)
    return (out / DRIVER_STATE_FILE).exists() or any((out / CHECKPOINT_DIR).glob("checkpoint_*.ftrl"))
