"""Observation filters with mergeable running statistics.

`MeanStdFilter` normalizes observations with a running mean/std (clipped to +-clip).
Each EnvRunner keeps the full statistics it normalizes with plus a *delta*: what it has
seen since its last sync. The driver merges runner deltas into its central filter
(`apply_delta`) and pushes the central state back (`set_state`), RLlib-style.
State and deltas are plain dicts of numpy arrays and ints (msgpack-able).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class RunningStat:
    """Count, mean and sum of squared deviations (M2) of a stream of arrays."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = tuple(shape)
        self.n = 0
        self.mean = np.zeros(self.shape, np.float64)
        self.m2 = np.zeros(self.shape, np.float64)

    def push_batch(self, x: np.ndarray) -> None:
        """Add a batch of rows x[i] (each of `shape`)."""
        x = np.asarray(x, np.float64).reshape((-1, *self.shape))
        if len(x) == 0:
            return
        other = RunningStat(self.shape)
        other.n = len(x)
        other.mean = x.mean(axis=0)
        other.m2 = ((x - other.mean) ** 2).sum(axis=0)
        self.merge(other)

    def merge(self, other: RunningStat) -> None:
        """Combine with another stream (Chan et al.'s parallel update)."""
        if other.n == 0:
            return
        if self.n == 0:
            self.n, self.mean, self.m2 = other.n, other.mean.copy(), other.m2.copy()
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.n / n)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.n * other.n / n)
        self.n = n

    @property
    def std(self) -> np.ndarray:
        if self.n < 2:
            return np.ones(self.shape, np.float64)
        return np.sqrt(self.m2 / (self.n - 1))

    def to_dict(self) -> dict[str, Any]:
        return {"n": int(self.n), "mean": self.mean.copy(), "m2": self.m2.copy()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunningStat:
        mean = np.asarray(data["mean"], np.float64)
        stat = cls(mean.shape)
        stat.n = int(data["n"])
        stat.mean = mean.copy()
        stat.m2 = np.asarray(data["m2"], np.float64).reshape(mean.shape).copy()
        if stat.n < 0:
            raise ValueError("running stat count must be >= 0")
        return stat


class NoFilter:
    """Identity filter (same interface as MeanStdFilter)."""

    kind = "NoFilter"

    def __init__(self, shape: tuple[int, ...] = ()):
        self.shape = tuple(shape)

    def __call__(self, x: np.ndarray, update: bool = True) -> np.ndarray:
        return x

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def set_state(self, state: dict[str, Any] | None) -> None:
        _check_kind(self.kind, state)

    def affine(self) -> None:
        """No transform (see `MeanStdFilter.affine`)."""
        return None

    def get_delta(self, flush: bool = True) -> dict[str, Any]:
        return {"kind": self.kind}

    def apply_delta(self, delta: dict[str, Any] | None) -> None:
        _check_kind(self.kind, delta)


class MeanStdFilter:
    """Normalize to zero mean, unit std using running stats; clip to +-`clip`."""

    kind = "MeanStdFilter"

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8,
                 raw_columns: Sequence[int] = ()):
        self.shape = tuple(shape)
        self.clip = clip
        self.eps = eps
        self.stats = RunningStat(self.shape)
        self.delta = RunningStat(self.shape)
        # columns passed as they are (one-hot, 0/1, pixel and action-mask parts of a
        # structured observation): mean 0, std 1 and no clip there
        self._raw = np.asarray(raw_columns, np.int64)
        self._bound: float | np.ndarray = clip
        if self._raw.size:
            self._bound = np.full(self.shape, clip, np.float32)
            self._bound.reshape(-1)[self._raw] = np.inf
        self._refresh()

    def _refresh(self) -> None:
        self._mean = self.stats.mean.astype(np.float32)
        self._inv_std = (1.0 / (self.stats.std + self.eps)).astype(np.float32)
        if self._raw.size:
            self._mean.reshape(-1)[self._raw] = 0.0
            self._inv_std.reshape(-1)[self._raw] = 1.0

    def __call__(self, x: np.ndarray, update: bool = True) -> np.ndarray:
        """Normalize a batch of observations [B, *shape]; update the stats first if asked."""
        if update:
            self.stats.push_batch(x)
            self.delta.push_batch(x)
            self._refresh()
        out = (np.asarray(x, np.float32) - self._mean) * self._inv_std
        np.clip(out, -self._bound, self._bound, out=out)
        return out

    def affine(self) -> tuple[np.ndarray, np.ndarray, float | np.ndarray]:
        """(mean, 1/std, clip) as it filters now: `clip((x - mean) / std, -clip, clip)`
        (what an exported policy folds into its graph; clip per column, inf for raw
        columns, when there are any)."""
        bound = self._bound.copy() if isinstance(self._bound, np.ndarray) else float(self._bound)
        return self._mean.copy(), self._inv_std.copy(), bound

    def get_state(self) -> dict[str, Any]:
        """The full statistics (what the driver pushes to runners and checkpoints)."""
        return {"kind": self.kind, "stats": self.stats.to_dict()}

    def set_state(self, state: dict[str, Any] | None) -> None:
        """Adopt full statistics; the local delta is cleared."""
        _check_kind(self.kind, state)
        assert state is not None
        stats = RunningStat.from_dict(state["stats"])
        if stats.shape != self.shape:
            raise ValueError(f"filter state has shape {stats.shape}, expected {self.shape}")
        self.stats = stats
        self.delta = RunningStat(self.shape)
        self._refresh()

    def get_delta(self, flush: bool = True) -> dict[str, Any]:
        """What this filter saw since the last flush."""
        out = {"kind": self.kind, "stats": self.delta.to_dict()}
        if flush:
            self.delta = RunningStat(self.shape)
        return out

    def apply_delta(self, delta: dict[str, Any] | None) -> None:
        """Merge a runner's delta into these (central) statistics."""
        _check_kind(self.kind, delta)
        assert delta is not None
        other = RunningStat.from_dict(delta["stats"])
        if other.shape != self.shape:
            raise ValueError(f"filter delta has shape {other.shape}, expected {self.shape}")
        self.stats.merge(other)
        self._refresh()


def _check_kind(kind: str, state: dict[str, Any] | None) -> None:
    if state is None or state.get("kind") != kind:
        got = None if state is None else state.get("kind")
        raise ValueError(f"filter state is for {got!r}, this filter is {kind!r}")


def make_filter(kind: str, shape: tuple[int, ...], raw_columns: Sequence[int] = ()) -> NoFilter | MeanStdFilter:
    """Build the observation filter named by config `observation_filter` (`raw_columns`:
    those a MeanStdFilter leaves as they are)."""
    if kind == "MeanStdFilter":
        return MeanStdFilter(shape, raw_columns=raw_columns)
    if kind == "NoFilter":
        return NoFilter(shape)
    raise ValueError(f"unknown observation_filter {kind!r}")
