"""Structured spaces as flat rows (imports no torch: sub-env processes use it).

Observations: a Dict or Tuple (nested) of Box, Discrete and MultiBinary becomes one flat
float32 row, its leaves side by side in the space's own order (`ObsPart`: a leaf's path,
kind, shape and columns; Discrete one-hot, the others flattened). RLlib's action-masking
convention: a top-level Dict key `action_mask` (a Box or MultiBinary of one 0/1 per
discrete choice) is written last, so the model's input is the row's first `input_dim`
columns and the mask its last `mask_dim`; the model never sees the mask as input.

Actions: MultiDiscrete, and a Tuple or Dict (nested) of Discrete, MultiDiscrete and Box.
Their leaves are `ActPart`s: ("discrete", n choices) or ("box", size); the policy emits
the logits of every discrete part and the means of every box part side by side. A batch
stores one column per discrete part and `size` per box part (int64 when every part is
discrete, else float32); `ActionTree` turns such a row back into the nested action the
env takes (box parts clipped to their bounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from ftrl.wire.errors import ConfigError

#: The Dict key of an action mask (RLlib's convention).
MASK_KEY = "action_mask"
#: The logit of a masked choice (numpy and torch policies alike): its probability is
#: exactly 0 in float32, and no NaN comes of it (as -inf would where all are masked).
MASKED_LOGIT = -1e9


@dataclass(frozen=True)
class ObsPart:
    """One leaf of a structured observation and its columns of the flat row."""

    path: str  # Dict keys and Tuple indices joined by "/" ("image", "pos/0")
    kind: str  # "box" | "discrete" | "multibinary"
    shape: tuple[int, ...]
    offset: int
    dim: int
    dtype: str = "float32"  # "uint8" for a byte Box

    def to_list(self) -> list[Any]:
        return [self.path, self.kind, list(self.shape), self.offset, self.dim, self.dtype]

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> ObsPart:
        return cls(str(v[0]), str(v[1]), tuple(int(x) for x in v[2]), int(v[3]), int(v[4]), str(v[5]))


def _leaf(space: gym.Space, path: str) -> tuple[str, tuple[int, ...], int, str]:
    """(kind, shape, columns, dtype) of a leaf space; ConfigError naming its path otherwise."""
    if isinstance(space, gym.spaces.Box):
        shape = tuple(space.shape)
        dtype = "uint8" if space.dtype == np.uint8 else "float32"
        return "box", shape, int(np.prod(shape)) if shape else 1, dtype
    if isinstance(space, gym.spaces.Discrete):
        if space.start != 0:
            raise ConfigError(f"observation part {path!r}: Discrete must start at 0, got {space}")
        return "discrete", (), int(space.n), "float32"
    if isinstance(space, gym.spaces.MultiBinary):
        shape = tuple(int(x) for x in np.atleast_1d(space.n))
        return "multibinary", shape, int(np.prod(shape)), "float32"
    raise ConfigError(f"observation part {path!r} is {space}: a Dict or Tuple may hold Box, Discrete, "
                      "MultiBinary, Dict and Tuple spaces")


def _walk(space: gym.Space, path: str, out: list[tuple[str, gym.Space]]) -> None:
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            _walk(sub, f"{path}/{key}" if path else str(key), out)
    elif isinstance(space, gym.spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _walk(sub, f"{path}/{i}" if path else str(i), out)
    else:
        out.append((path, space))


def obs_parts(space: gym.Dict | gym.spaces.Tuple) -> tuple[tuple[ObsPart, ...], int]:
    """The leaves of a Dict or Tuple observation space as columns of one row, and how many
    of the last columns are the action mask (0: none)."""
    leaves: list[tuple[str, gym.Space]] = []
    mask: gym.Space | None = None
    if isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces:
        mask = space.spaces[MASK_KEY]
        if not isinstance(mask, (gym.spaces.Box, gym.spaces.MultiBinary)) or len(np.atleast_1d(
                mask.shape)) != 1:
            raise ConfigError(f"observation key {MASK_KEY!r} must be a 1-D Box or MultiBinary of one 0/1 "
                              f"per discrete action choice, got {mask}")
        for key, sub in space.spaces.items():
            if key != MASK_KEY:
                _walk(sub, str(key), leaves)
        leaves.append((MASK_KEY, mask))
    else:
        _walk(space, "", leaves)
    if not leaves or (mask is not None and len(leaves) == 1):
        raise ConfigError(f"observation space {space} has no parts to observe")
    parts, offset = [], 0
    for path, sub in leaves:
        kind, shape, dim, dtype = _leaf(sub, path)
        if dim <= 0:
            raise ConfigError(f"observation part {path!r} ({sub}) has no dimensions")
        parts.append(ObsPart(path, kind, shape, offset, dim, dtype))
        offset += dim
    return tuple(parts), (parts[-1].dim if mask is not None else 0)


class StructWriter:
    """Writes a structured observation into a flat float32 row (ValueError naming the part
    that does not fit: a missing key, a wrong shape, a Discrete value out of range, or an
    action mask of no allowed choice)."""

    def __init__(self, parts: Sequence[ObsPart], mask_dim: int, mask_groups: Sequence[int] = ()):
        self._parts = [(p, tuple(int(k) if k.isdigit() else k for k in p.path.split("/"))) for p in parts]
        self._mask_dim = mask_dim
        self._mask_groups = list(mask_groups)  # the choices of each discrete action part

    def _get(self, obs: Any, keys: tuple[Any, ...], path: str) -> Any:
        for k in keys:
            try:
                obs = obs[k] if not isinstance(k, int) or not isinstance(obs, dict) else obs.get(k, obs.get(str(k)))
            except (KeyError, IndexError, TypeError) as e:
                raise ValueError(f"observation part {path!r} is missing ({type(e).__name__}: {e})") from None
            if obs is None:
                raise ValueError(f"observation part {path!r} is missing")
        return obs

    def write(self, row: np.ndarray, obs: Any) -> None:
        for part, keys in self._parts:
            value = self._get(obs, keys, part.path)
            cols = row[part.offset: part.offset + part.dim]
            if part.kind == "discrete":
                k = int(value)
                if not 0 <= k < part.dim:
                    raise ValueError(f"observation part {part.path!r}: {k} is outside Discrete({part.dim})")
                cols[:] = 0.0
                cols[k] = 1.0
                continue
            arr = np.asarray(value, dtype=np.float32)
            if arr.size != part.dim:
                raise ValueError(f"observation part {part.path!r} has shape {arr.shape}, expected {part.shape}")
            cols[:] = arr.reshape(part.dim)
        if self._mask_dim:
            self._check_mask(row[-self._mask_dim:])

    def _check_mask(self, mask: np.ndarray) -> None:
        start = 0
        for i, n in enumerate(self._mask_groups):
            if not (mask[start: start + n] > 0).any():
                which = "" if len(self._mask_groups) == 1 else f" of action part {i}"
                raise ValueError(f"observation part {MASK_KEY!r} allows no action{which}")
            start += n


# ---------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class ActPart:
    """One leaf of a structured action: "discrete" with `size` choices, or "box" of `size` values."""

    kind: str
    size: int


def _act_tree(space: gym.Space, path: str, parts: list[ActPart], low: list[float], high: list[float]) -> Any:
    """The msgpack-able shape of an action space (appending its leaves to `parts`)."""
    if isinstance(space, gym.spaces.Discrete):
        if space.start != 0:
            raise ConfigError(f"action part {path or 'action'!r}: Discrete must start at 0, got {space}")
        parts.append(ActPart("discrete", int(space.n)))
        return "d"
    if isinstance(space, gym.spaces.MultiDiscrete):
        if np.asarray(space.start).any():
            raise ConfigError(f"action part {path or 'action'!r}: MultiDiscrete must start at 0, got {space}")
        nvec = np.asarray(space.nvec)
        if nvec.ndim != 1 or (nvec < 1).any():
            raise ConfigError(f"action part {path or 'action'!r}: MultiDiscrete needs a 1-D nvec of at least 1 "
                              f"choice each, got {nvec.tolist()}")
        parts.extend(ActPart("discrete", int(n)) for n in nvec)
        return ["md", len(nvec)]
    if isinstance(space, gym.spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            raise ConfigError(f"action part {path or 'action'!r}: a Box must have a float dtype, got {space.dtype}")
        shape = tuple(space.shape)
        size = int(np.prod(shape)) if shape else 1
        parts.append(ActPart("box", size))
        low.extend(float(x) for x in np.broadcast_to(space.low, shape).reshape(-1))
        high.extend(float(x) for x in np.broadcast_to(space.high, shape).reshape(-1))
        return ["b", list(shape)]
    if isinstance(space, gym.spaces.Tuple):
        return ["t", [_act_tree(s, f"{path}/{i}", parts, low, high) for i, s in enumerate(space.spaces)]]
    if isinstance(space, gym.spaces.Dict):
        return ["k", [[str(k), _act_tree(s, f"{path}/{k}", parts, low, high)] for k, s in space.spaces.items()]]
    raise ConfigError(f"action part {path or 'action'!r} is {space}: use Discrete, MultiDiscrete, Box, "
                      "or a Tuple or Dict of them")


def act_parts(space: gym.Space) -> tuple[tuple[ActPart, ...], Any, tuple[float, ...], tuple[float, ...]]:
    """The leaves of a structured action space, its tree (for `ActionTree`) and the bounds
    of its box parts, in order."""
    parts: list[ActPart] = []
    low: list[float] = []
    high: list[float] = []
    tree = _act_tree(space, "", parts, low, high)
    return tuple(parts), tree, tuple(low), tuple(high)


class ActionTree:
    """Rows of a structured action batch -> the nested actions the env takes."""

    def __init__(self, tree: Any, low: Sequence[float], high: Sequence[float]):
        self._tree = tree
        self._low = np.asarray(low, np.float32)
        self._high = np.asarray(high, np.float32)

    def to_env(self, row: np.ndarray) -> Any:
        row = np.asarray(row)
        if self._low.size:
            row = row.astype(np.float32)
        value, _, _ = self._build(self._tree, row, 0, 0)
        return value

    def to_row(self, action: Any) -> list[float]:
        """A nested action as the env takes it -> its row's columns (the inverse of `to_env`)."""
        out: list[float] = []
        self._flatten(self._tree, action, out)
        return out

    def _flatten(self, tree: Any, value: Any, out: list[float]) -> None:
        if tree == "d":
            out.append(float(np.asarray(value).reshape(-1)[0]))
            return
        kind, arg = tree
        if kind in ("md", "b"):
            out.extend(float(x) for x in np.asarray(value, np.float64).reshape(-1))
        elif kind == "t":
            for sub, item in zip(arg, value, strict=True):
                self._flatten(sub, item, out)
        else:
            for key, sub in arg:
                self._flatten(sub, value[key], out)

    def _build(self, tree: Any, row: np.ndarray, col: int, box: int) -> tuple[Any, int, int]:
        """(the action of `tree` from row[col:], next column, next box bound)."""
        if tree == "d":
            return int(row[col]), col + 1, box
        kind, arg = tree
        if kind == "md":
            return row[col: col + arg].astype(np.int64), col + arg, box
        if kind == "b":
            size = int(np.prod(arg)) if arg else 1
            values = np.clip(row[col: col + size], self._low[box: box + size], self._high[box: box + size])
            return values.astype(np.float32).reshape(arg), col + size, box + size
        if kind == "t":
            items = []
            for sub in arg:
                item, col, box = self._build(sub, row, col, box)
                items.append(item)
            return tuple(items), col, box
        out = {}
        for key, sub in arg:
            out[key], col, box = self._build(sub, row, col, box)
        return out, col, box
