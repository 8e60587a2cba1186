"""TensorBoard event files of a run: every numeric key of each metrics row, custom and
evaluation metrics included (nested keys as "/" paths: `custom_metrics/NAME_mean`,
`evaluation/episode_return_mean`), at the row's `env_steps_sampled`, in the run's output
directory, so `tensorboard --logdir OUTPUT` shows the run (and, under `ftrl tune`,
`--logdir EXPERIMENT_DIR` shows one run per trial).

The writer is tensorboardX's; rows reach it once they are on disk (from the state
writer's thread, never from the training loop) through a queue that a thread of its
own empties, so neither importing tensorboardX nor a slow disk delays the state writer
or the rows' reports. A resumed
run starts its event file with a purge at the step it resumed from, so TensorBoard
hides what an earlier incarnation wrote past it. A writer that fails is logged once and
turned off: TensorBoard never stops a run.
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: the x axis of every curve
STEP_KEY = "env_steps_sampled"
#: row keys that are no curves
_NOT_CURVES = frozenset({"timestamp", "iteration"})
EVENT_FILE_GLOB = "events.out.tfevents.*"


def scalars(row: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """(tag, value) of every number in `row` (nested dicts as "/" paths; booleans, None,
    NaN and text left out)."""
    for key, value in row.items():
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from scalars(value, f"{tag}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if key in _NOT_CURVES and not prefix:
                continue
            value = float(value)
            if math.isfinite(value):
                yield tag, value


class TensorBoardLog:
    """The event file of one run directory (opened on the first row, by its thread)."""

    def __init__(self, directory: str | Path, purge_step: int | None = None) -> None:
        self.directory = Path(directory)
        self.purge_step = purge_step
        self._writer: Any = None
        self._broken = False
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def write_row(self, row: Mapping[str, Any]) -> None:
        """Queue `row` for the writer's thread (returns at once)."""
        self._queue_call(functools.partial(self._write, row))

    def _queue_call(self, work: Callable[[], None]) -> None:
        if self._broken:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="ftrl-tensorboard", daemon=True)
                self._thread.start()
        self._queue.put(work)

    def _drain(self) -> None:
        while True:  # ends at the None that close() queues
            work = self._queue.get()
            if work is None:
                return
            try:
                work()
            except Exception as e:  # a video that does not decode: logged, the rows go on
                log.warning("TensorBoard: %s", e)

    def _write(self, row: Mapping[str, Any]) -> None:
        """Every curve of `row` at its env steps, and the iteration as its own curve."""
        if self._broken:
            return
        try:
            writer = self._open()
            step = int(row.get(STEP_KEY) or 0)
            for tag, value in scalars(row):
                writer.add_scalar(tag, value, step)
            if isinstance(row.get("iteration"), int):
                writer.add_scalar("iteration", row["iteration"], step)
            writer.flush()
        except Exception as e:  # a full disk, a broken install: the run goes on without it
            self._broken = True
            log.error("TensorBoard logging is off for this run: writing to %s failed: %s", self.directory, e)

    def add_video_file(self, tag: str, path: Path, step: int, fps: int) -> None:
        """An MP4 file's frames as a TensorBoard video at `step`, queued for the writer's
        thread; only where tensorboardX can encode one (it needs moviepy): else nothing."""
        try:
            import moviepy  # noqa: F401  (tensorboardX encodes videos with it)
        except ImportError:
            log.debug("no moviepy: %s is not logged to TensorBoard (the MP4 is in the run's videos/)", path)
            return
        self._queue_call(lambda: self._video(tag, path, step, fps))

    def _video(self, tag: str, path: Path, step: int, fps: int) -> None:
        import imageio.v2 as imageio
        import numpy as np

        frames = np.stack(list(imageio.get_reader(str(path), format="FFMPEG")))
        self._open().add_video(tag, np.transpose(frames[None], (0, 1, 4, 2, 3)), step, fps=fps)

    def _open(self) -> Any:
        if self._writer is None:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(str(self.directory), purge_step=self.purge_step, flush_secs=10)
        return self._writer

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is queued (up to `timeout_s`), then close the file."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout_s)
            if thread.is_alive():
                log.warning("TensorBoard writer of %s did not finish in %.0f s", self.directory, timeout_s)
                return
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception as e:
                log.warning("closing the TensorBoard writer of %s: %s", self.directory, e)
            self._writer = None


def forget_event_files(directory: str | Path) -> int:
    """A fresh run in `directory`: an earlier run's event files go; how many did."""
    gone = 0
    for path in Path(directory).glob(EVENT_FILE_GLOB):
        path.unlink(missing_ok=True)
        gone += 1
    return gone
