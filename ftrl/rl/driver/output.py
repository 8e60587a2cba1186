"""RunOutput: a run's output directory and what writes into it.

    output_dir/
      metrics.jsonl        one row per iteration (MetricsLog), written by the state writer
      driver_state.ftrl    the newest iteration's driver state (StateWriter)
      learner_state.ftrl   the learner state it names (StateWriter)
      checkpoints/         checkpoint_<iteration>.ftrl (CheckpointManager, the newest kept)
      result.json          how the run ended (`write_result`)
      videos/              episode_<N>.mp4: evaluation videos (`evaluation_video_interval`),
                           N the run's episode count when it was recorded (`write_video`)
      events.out.tfevents.*  TensorBoard's curves of the rows (`reporting(tensorboard=True)`,
                           ftrl.rl.driver.tensorboard), written once each row is on disk

A fresh run in a directory that held another forgets that run's driver and learner
state and its rows (`start_fresh`); a resumed one reads them (ftrl.rl.driver.state).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftrl.rl.driver.checkpoint import CheckpointManager
from ftrl.rl.driver.metrics import MetricsLog, json_safe
from ftrl.rl.driver.state_writer import StateWriter
from ftrl.rl.driver.tensorboard import TensorBoardLog, forget_event_files
from ftrl.util.files import atomic_write_bytes, atomic_write_json
from ftrl.util.run_dir import CHECKPOINT_DIR, DRIVER_STATE_FILE, LEARNER_STATE_FILE

log = logging.getLogger(__name__)

RESULT_FILE = "result.json"
VIDEO_DIR = "videos"


def forget_saved_state(output_dir: str | Path) -> None:
    """A fresh run in `output_dir`: the driver and learner state of an earlier run go."""
    for name in (DRIVER_STATE_FILE, LEARNER_STATE_FILE):
        (Path(output_dir) / name).unlink(missing_ok=True)


class RunOutput:
    """The output directory of one run: its checkpoints, metrics log, state writer and
    TensorBoard event file (`on_row_durable(row)` is called on the writer's thread once a
    row is on disk; then the row goes to TensorBoard's queue)."""

    def __init__(self, directory: str | Path, keep_checkpoints: int,
                 on_row_durable: Callable[[dict[str, Any]], Any] | None = None, tensorboard: bool = True) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.checkpoints = CheckpointManager(self.directory / CHECKPOINT_DIR, keep_checkpoints)
        self.metrics_log = MetricsLog(self.directory / "metrics.jsonl")
        self.tensorboard = TensorBoardLog(self.directory) if tensorboard else None
        self._on_row_durable = on_row_durable
        self.state_writer = StateWriter(self.directory, self.metrics_log, on_durable=self._row_durable)

    def _row_durable(self, row: dict[str, Any]) -> None:
        if self._on_row_durable is not None:
            self._on_row_durable(row)
        if self.tensorboard is not None:
            self.tensorboard.write_row(row)

    def set_tensorboard(self, on: bool) -> None:
        """Write TensorBoard events from the next row on, or stop writing them."""
        if on and self.tensorboard is None:
            self.tensorboard = TensorBoardLog(self.directory)
        elif not on and self.tensorboard is not None:
            board, self.tensorboard = self.tensorboard, None
            board.close()

    def start_fresh(self) -> None:
        """A fresh run: iterations restart at 1, so an earlier run's rows, states and
        TensorBoard events go."""
        forget_saved_state(self.directory)
        forget_event_files(self.directory)
        if self.metrics_log.path.exists():
            dropped = self.metrics_log.truncate_after(0)
            log.warning("fresh run in %s: dropped %d old metrics lines", self.directory, dropped)

    def resumed_at(self, env_steps: int) -> None:
        """The run resumed from a state at `env_steps`: TensorBoard hides what an earlier
        incarnation wrote after it (the rows past the state are gone too)."""
        if self.tensorboard is not None:
            self.tensorboard.purge_step = env_steps + 1

    def latest_checkpoint(self) -> Path | None:
        """The newest checkpoint file under checkpoints/ (None if there is none)."""
        found = self.checkpoints.list()
        return found[-1][1] if found else None

    def write_video(self, video: dict[str, Any], episode_count: int, env_steps: int) -> Path:
        """An evaluation's video ({"mp4": bytes, "fps", ...} from its runner) to
        videos/episode_<episode_count>.mp4 (atomically), and to TensorBoard where its
        writer can show videos; the path."""
        path = self.directory / VIDEO_DIR / f"episode_{episode_count:09d}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, bytes(video["mp4"]))
        if self.tensorboard is not None:
            self.tensorboard.add_video_file("evaluation/video", path, env_steps, int(video.get("fps") or 30))
        return path

    def write_result(self, summary: dict[str, Any]) -> None:
        """result.json: how the run ended."""
        atomic_write_json(self.directory / RESULT_FILE, json_safe(summary))

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every finished iteration's state and row are on disk; whether they are."""
        return self.state_writer.flush(timeout_s)

    def close(self) -> bool:
        """Stop the state writer once what it holds is written (and the TensorBoard
        writer after it); whether all of it was."""
        done = self.state_writer.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        return done
