"""A trained policy's state from a path, for `Algorithm.from_checkpoint`, `ftrl evaluate`
and `ftrl plot`: a checkpoint file (`checkpoints/checkpoint_N.ftrl`) or a run directory,
whose newest state is taken (its driver state with the learner state beside it, or its
newest checkpoint, whichever is newer; ftrl.rl.driver.state.newest_state).

    state, source = load_trained_state("runs/cartpole")   # a full state: config, filter, learner
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftrl.rl.driver.checkpoint import CheckpointManager
from ftrl.rl.driver.state import newest_state
from ftrl.rl.driver.state_writer import load_state_file
from ftrl.util.run_dir import CHECKPOINT_DIR, DRIVER_STATE_FILE, LEARNER_STATE_FILE
from ftrl.wire.errors import NotFoundError


def load_trained_state(path: str | Path) -> tuple[dict[str, Any], Path]:
    """(the newest full state at `path`, the file it came from). NotFoundError naming what
    was looked for when there is none (no state, or no learner weights for it)."""
    p = Path(path).expanduser()
    if p.is_dir():
        found = newest_state(p)
        if found is None:
            raise NotFoundError(
                f"no checkpoint or driver state in {p}: looked for {p / DRIVER_STATE_FILE} and "
                f"{p / CHECKPOINT_DIR}/checkpoint_*.ftrl (a run's output directory, or one of its checkpoints)")
        state, source = found
    elif p.exists():
        loaded = load_state_file(p)
        if loaded is None:
            raise NotFoundError(f"{p} is not a readable ftrl checkpoint or driver state (torn or corrupt)")
        state, source = loaded, p
    else:
        raise NotFoundError(f"{p} does not exist (give a run's output directory or a checkpoint file)")
    if isinstance(state.get("learner"), dict):
        return state, source
    return _with_learner(state, source)


def _with_learner(state: dict[str, Any], source: Path) -> tuple[dict[str, Any], Path]:
    """A driver state (no learner inside) with the learner state written beside it, or
    the newest checkpoint when that one is not of the same weights version."""
    directory = source.parent
    learner = load_state_file(directory / LEARNER_STATE_FILE)
    if isinstance(learner, dict) and learner.get("version") == state.get("learner_version"):
        return {**state, "learner": learner}, source
    checkpoint = CheckpointManager(directory / CHECKPOINT_DIR).load_latest()
    if checkpoint is not None and isinstance(checkpoint[0].get("learner"), dict):
        return checkpoint[0], checkpoint[1]
    raise NotFoundError(f"{source} names learner weights version {state.get('learner_version')}, but neither "
                        f"{directory / LEARNER_STATE_FILE} nor a checkpoint under {directory / CHECKPOINT_DIR} "
                        "holds learner weights")
