"""Episode statistics over a window of episodes, and the metrics.jsonl log.

`episode_return_mean` is the mean return of the last `window` (100) finished episodes,
a window across iterations (RLlib's classic smoothing), None before any episode.
Cut episodes (sub-env failures) never enter the window. The custom metrics the user's
callbacks logged per episode share the window: `custom_stats()` gives NAME_mean,
NAME_min and NAME_max over the window's episodes that logged NAME.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ftrl.rl.callbacks import custom_metric_stats
from ftrl.util.files import atomic_write_bytes


class EpisodeWindow:
    """Returns, lengths and custom metric values of the last `window` finished episodes."""

    def __init__(self, window: int = 100):
        self.window = window
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        #: per episode, {name: value} of the custom metrics its callbacks logged
        self.custom: deque[dict[str, float]] = deque(maxlen=window)
        self.episodes_total = 0

    def resize(self, window: int) -> None:
        """Keep the last `window` episodes from now on (the newest of those held stay)."""
        self.window = int(window)
        self.returns = deque(self.returns, maxlen=self.window)
        self.lengths = deque(self.lengths, maxlen=self.window)
        self.custom = deque(self.custom, maxlen=self.window)

    def add(self, returns: Iterable[float], lengths: Iterable[int],
            custom: Mapping[str, Iterable[float]] | None = None) -> int:
        """Add finished episodes (`custom`: {name: a value per episode, NaN: not logged});
        returns how many were added."""
        returns, lengths = list(returns), list(lengths)
        columns = {str(k): list(v) for k, v in (custom or {}).items()}
        if any(len(column) != len(returns) for column in columns.values()):
            columns = {}  # (a runner of another version) values that fit no episode: not kept
        for j, (r, length) in enumerate(zip(returns, lengths, strict=True)):
            self.returns.append(float(r))
            self.lengths.append(int(length))
            self.custom.append({k: float(v[j]) for k, v in columns.items() if v[j] == v[j]})
        self.episodes_total += len(returns)
        return len(returns)

    def custom_stats(self) -> dict[str, float]:
        """{"NAME_mean", "NAME_min", "NAME_max"} over the window's episodes that logged NAME."""
        columns: dict[str, list[float]] = {}
        for values in self.custom:
            for name, value in values.items():
                columns.setdefault(name, []).append(value)
        return custom_metric_stats(columns)

    def adopt(self, other: EpisodeWindow) -> None:
        """The episodes of `other`'s window in place of this one's (PBT's exploit), as many
        of its newest as this window holds; this run's episodes_total stays."""
        self.returns = deque(other.returns, maxlen=self.window)
        self.lengths = deque(other.lengths, maxlen=self.window)
        self.custom = deque(other.custom, maxlen=self.window)

    def stats(self) -> dict[str, Any]:
        if not self.returns:
            return {
                "episode_return_mean": None,
                "episode_return_min": None,
                "episode_return_max": None,
                "episode_len_mean": None,
            }
        r = np.fromiter(self.returns, np.float64)
        return {
            "episode_return_mean": float(r.mean()),
            "episode_return_min": float(r.min()),
            "episode_return_max": float(r.max()),
            "episode_len_mean": float(np.mean(self.lengths)),
        }

    def get_state(self) -> dict[str, Any]:
        names = sorted({name for values in self.custom for name in values})
        return {
            "returns": np.asarray(self.returns, np.float64),
            "lengths": np.asarray(self.lengths, np.int64),
            "episodes_total": self.episodes_total,
            "custom": {name: np.asarray([v.get(name, np.nan) for v in self.custom], np.float64) for name in names},
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        returns = [float(x) for x in state["returns"]]
        lengths = [int(x) for x in state["lengths"]]
        columns = {str(k): list(v) for k, v in (state.get("custom") or {}).items()}
        if any(len(column) != len(returns) for column in columns.values()):
            columns = {}
        custom = [{k: float(v[j]) for k, v in columns.items() if v[j] == v[j]} for j in range(len(returns))]
        self.returns = deque(returns, maxlen=self.window)
        self.lengths = deque(lengths, maxlen=self.window)
        self.custom = deque(custom, maxlen=self.window)
        self.episodes_total = int(state.get("episodes_total", len(self.returns)))


def json_safe(obj: Any) -> Any:
    """Make a result JSON-able: NaN/inf become null, numpy scalars/arrays become Python."""
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


class MetricsLog:
    """Appends one JSON object per iteration to `path` (flushed and fsynced per line)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, result: Mapping[str, Any]) -> None:
        self.append_many([result])

    def append_many(self, results: Iterable[Mapping[str, Any]]) -> None:
        """Append rows, in order, with one fsync: all of them or none (a write or fsync
        that fails, e.g. on a full disk, is cut back off, so a retry never repeats a row
        or leaves a torn one in the middle of the file)."""
        text = _lines(json_safe(r) for r in results)
        if not text:
            return
        with self.path.open("a", encoding="utf-8") as f:
            size = f.seek(0, os.SEEK_END)
            try:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            except BaseException:
                with contextlib.suppress(OSError):
                    os.truncate(self.path, size)
                raise

    def last(self) -> dict[str, Any] | None:
        """The well-formed row with the highest iteration, or None."""
        rows = [r for r in self.read() if isinstance(r.get("iteration"), int)]
        return max(rows, key=lambda r: r["iteration"]) if rows else None

    def read(self) -> list[dict[str, Any]]:
        """Every well-formed line (a torn last line is skipped)."""
        return _parse(self._text().splitlines())

    def drop_torn_lines(self) -> int:
        """Rewrite the file without lines that are not whole JSON objects (a write torn
        by a crash); returns how many went. Whole rows are never removed."""
        text = self._text()
        lines = text.splitlines()
        kept = _parse(lines)
        if len(kept) == len(lines) and (not text or text.endswith("\n")):
            return 0
        atomic_write_bytes(self.path, _lines(kept).encode("utf-8"))
        return len(lines) - len(kept)

    def truncate_after(self, iteration: int) -> int:
        """Keep only lines with iteration <= `iteration` (and drop torn lines); atomically.
        Returns how many lines were dropped."""
        if not self.path.exists():
            return 0
        lines = self._text().splitlines()
        kept = [r for r in _parse(lines) if isinstance(r.get("iteration"), int) and r["iteration"] <= iteration]
        atomic_write_bytes(self.path, _lines(kept).encode("utf-8"))
        return len(lines) - len(kept)

    def _text(self) -> str:
        return self.path.read_text(encoding="utf-8") if self.path.exists() else ""


def _lines(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows as metrics.jsonl lines."""
    return "".join(json.dumps(r, allow_nan=False, sort_keys=True) + "\n" for r in rows)


def _parse(lines: list[str]) -> list[dict[str, Any]]:
    """The lines that are whole JSON objects, parsed."""
    out = []
    for line in lines:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
