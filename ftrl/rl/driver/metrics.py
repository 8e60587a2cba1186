"""Episode statistics over a window of episodes, and the metrics.jsonl log.

`episode_return_mean` is the mean return of the last `window` (100) finished episodes,
a window across iterations (RLlib's classic smoothing), None before any episode.
Cut episodes (sub-env failures) never enter the window.
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

from ftrl.util.files import atomic_write_bytes


class EpisodeWindow:
    """Returns and lengths of the last `window` finished episodes."""

    def __init__(self, window: int = 100):
        self.window = window
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.episodes_total = 0

    def add(self, returns: Iterable[float], lengths: Iterable[int]) -> int:
        """Add finished episodes; returns how many were added."""
        n = 0
        for r, length in zip(returns, lengths, strict=True):
            self.returns.append(float(r))
            self.lengths.append(int(length))
            n += 1
        self.episodes_total += n
        return n

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
        return {
            "returns": np.asarray(self.returns, np.float64),
            "lengths": np.asarray(self.lengths, np.int64),
            "episodes_total": self.episodes_total,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.returns = deque((float(x) for x in state["returns"]), maxlen=self.window)
        self.lengths = deque((int(x) for x in state["lengths"]), maxlen=self.window)
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
