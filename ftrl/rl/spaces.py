"""Which spaces the models handle, and how observations become flat vectors.

Observations are encoded to flat float32 vectors: Box (any shape) is flattened,
Discrete becomes one-hot, MultiBinary becomes 0/1 floats, and a Dict or Tuple of them
(nested; "struct") has its leaves side by side, an `action_mask` key last
(`ftrl.rl.space_parts`). Actions may be Discrete, Box, or "multi": MultiDiscrete, or a
Tuple or Dict of Discrete, MultiDiscrete and Box. Any other space (Text, Graph...) is a
ConfigError. This module imports no torch, so sub-env child processes can use it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from ftrl.rl.space_parts import ActionTree, ActPart, ObsPart, StructWriter, act_parts, obs_parts
from ftrl.wire.errors import ConfigError


@dataclass(frozen=True)
class SpaceSpec:
    """What the model needs to know about an env's spaces (msgpack-able via to_dict)."""

    obs_kind: str  # "box" | "discrete" | "multibinary" | "struct"
    obs_shape: tuple[int, ...]
    obs_dim: int
    act_kind: str  # "discrete" | "box" | "multi"
    act_shape: tuple[int, ...]
    act_dim: int  # number of actions (discrete), flat action size (box), logits and means (multi)
    act_low: tuple[float, ...] = ()  # bounds of the box (multi: of its box parts, in order)
    act_high: tuple[float, ...] = ()
    #: "uint8" for byte observations (pixels: a CNN scales them to [0, 1]); "float32"
    #: for every other kind (all arrive as float32 rows; byte ones as uint8 rows where no
    #: filter changes them, see `row_dtype`)
    obs_dtype: str = "float32"
    obs_parts: tuple[ObsPart, ...] = ()  # "struct": the leaves' columns
    mask_dim: int = 0  # the last columns of a row that are the action mask (0: none)
    act_parts: tuple[ActPart, ...] = ()  # "multi": the leaves of the action
    act_tree: Any = None  # "multi": the action's nesting (ftrl.rl.space_parts.ActionTree)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["obs_parts"] = [p.to_list() for p in self.obs_parts]
        d["act_parts"] = [[p.kind, p.size] for p in self.act_parts]
        d["act_tree"] = _thaw(self.act_tree)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpaceSpec:
        return cls(
            obs_kind=str(d["obs_kind"]),
            obs_shape=tuple(int(x) for x in d["obs_shape"]),
            obs_dim=int(d["obs_dim"]),
            act_kind=str(d["act_kind"]),
            act_shape=tuple(int(x) for x in d["act_shape"]),
            act_dim=int(d["act_dim"]),
            act_low=tuple(float(x) for x in d.get("act_low", ())),
            act_high=tuple(float(x) for x in d.get("act_high", ())),
            obs_dtype=str(d.get("obs_dtype", "float32")),
            obs_parts=tuple(ObsPart.from_list(p) for p in d.get("obs_parts", ())),
            mask_dim=int(d.get("mask_dim", 0)),
            act_parts=tuple(ActPart(str(k), int(n)) for k, n in d.get("act_parts", ())),
            act_tree=_freeze(d.get("act_tree")),
        )

    @property
    def input_dim(self) -> int:
        """The columns of a row the model reads (all but the action mask)."""
        return self.obs_dim - self.mask_dim

    @property
    def action_parts(self) -> tuple[ActPart, ...]:
        """The action's leaves (one for Discrete and Box)."""
        if self.act_kind == "multi":
            return self.act_parts
        return (ActPart(self.act_kind, self.act_dim),)

    @property
    def box_dim(self) -> int:
        """How many Gaussian action values there are (each with a log std)."""
        return sum(p.size for p in self.action_parts if p.kind == "box")

    @property
    def all_discrete(self) -> bool:
        return all(p.kind == "discrete" for p in self.action_parts)

    @property
    def action_dtype(self) -> np.dtype:
        return np.dtype(np.int64) if self.all_discrete else np.dtype(np.float32)

    @property
    def action_row_shape(self) -> tuple[int, ...]:
        """The shape of one action in a batch: () for Discrete, (columns,) otherwise."""
        if self.act_kind == "discrete":
            return ()
        if self.act_kind == "box":
            return (self.act_dim,)
        return (sum(1 if p.kind == "discrete" else p.size for p in self.act_parts),)

    @property
    def bytes_rows(self) -> bool:
        """Observations that travel as uint8 rows (a byte Box: pixels): the runners' buffers,
        fragments, the wire, the queue and the learner's host batch keep them as bytes, and
        the model makes them float on the learner's device (`FlatActorCritic._input`)."""
        return self.obs_kind == "box" and self.obs_dtype == "uint8"

    def row_dtype(self, filtered: bool) -> np.dtype:
        """The dtype of observation rows: uint8 for byte rows no filter changes, else float32."""
        return np.dtype(np.uint8) if self.bytes_rows and not filtered else np.dtype(np.float32)

    @property
    def byte_columns(self) -> list[int]:
        """The columns of a structured row that are uint8 leaves (images): sent as bytes."""
        return [c for p in self.obs_parts if p.dtype == "uint8" for c in range(p.offset, p.offset + p.dim)]

    def unfiltered_columns(self) -> list[int]:
        """The columns an observation filter leaves as they are (one-hot, 0/1, pixel and
        action-mask parts)."""
        return [c for p in self.obs_parts if p.kind != "box" or p.dtype == "uint8" or p.path == "action_mask"
                for c in range(p.offset, p.offset + p.dim)]


def _freeze(tree: Any) -> Any:
    """An action tree as nested tuples (hashable: the spec is)."""
    return tuple(_freeze(x) for x in tree) if isinstance(tree, (list, tuple)) else tree


def _thaw(tree: Any) -> Any:
    return [_thaw(x) for x in tree] if isinstance(tree, (list, tuple)) else tree


def space_spec(observation_space: gym.Space, action_space: gym.Space) -> SpaceSpec:
    """Describe the spaces, or raise ConfigError for one the model cannot handle."""
    if isinstance(observation_space, gym.spaces.Box):
        obs_kind, obs_shape = "box", tuple(observation_space.shape)
        obs_dim = int(np.prod(obs_shape)) if obs_shape else 1
    elif isinstance(observation_space, gym.spaces.Discrete):
        obs_kind, obs_shape, obs_dim = "discrete", (), int(observation_space.n)
    elif isinstance(observation_space, gym.spaces.MultiBinary):
        obs_kind, obs_shape = "multibinary", tuple(np.atleast_1d(observation_space.n))
        obs_dim = int(np.prod(obs_shape))
    elif isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        parts, mask_dim = obs_parts(observation_space)
        obs_dim = parts[-1].offset + parts[-1].dim
        return _with_action(SpaceSpec("struct", (obs_dim,), obs_dim, "discrete", (), 1, obs_parts=parts,
                                      mask_dim=mask_dim), action_space)
    else:
        raise ConfigError(
            f"observation space {observation_space} is not supported: use Box, Discrete, "
            "MultiBinary, or a Dict or Tuple of them"
        )
    if obs_dim <= 0:
        raise ConfigError(f"observation space {observation_space} has no dimensions")
    obs_dtype = "uint8" if obs_kind == "box" and observation_space.dtype == np.uint8 else "float32"
    return _with_action(SpaceSpec(obs_kind, obs_shape, obs_dim, "discrete", (), 1, obs_dtype=obs_dtype),
                        action_space)


def _with_action(obs: SpaceSpec, action_space: gym.Space) -> SpaceSpec:
    """`obs` (its observation fields) with the action fields of `action_space`."""
    if isinstance(action_space, gym.spaces.Discrete):
        if action_space.start != 0:
            raise ConfigError(f"Discrete action space must start at 0, got {action_space}")
        spec = dataclasses.replace(obs, act_kind="discrete", act_shape=(), act_dim=int(action_space.n))
    elif isinstance(action_space, gym.spaces.Box):
        if not np.issubdtype(action_space.dtype, np.floating):
            raise ConfigError(f"Box action space must have a float dtype, got {action_space.dtype}")
        shape = tuple(action_space.shape)
        dim = int(np.prod(shape)) if shape else 1
        low = tuple(float(x) for x in np.broadcast_to(action_space.low, shape).reshape(-1))
        high = tuple(float(x) for x in np.broadcast_to(action_space.high, shape).reshape(-1))
        spec = dataclasses.replace(obs, act_kind="box", act_shape=shape, act_dim=dim, act_low=low, act_high=high)
    elif isinstance(action_space, (gym.spaces.MultiDiscrete, gym.spaces.Tuple, gym.spaces.Dict)):
        parts, tree, low, high = act_parts(action_space)
        multi = dataclasses.replace(obs, act_kind="multi", act_dim=sum(p.size for p in parts), act_low=low,
                                    act_high=high, act_parts=parts, act_tree=_freeze(tree))
        spec = dataclasses.replace(multi, act_shape=multi.action_row_shape)
    else:
        raise ConfigError(
            f"action space {action_space} is not supported: use Discrete (Categorical policy), "
            "Box (diagonal Gaussian policy), MultiDiscrete, or a Tuple or Dict of them"
        )
    if spec.mask_dim:
        choices = sum(p.size for p in spec.action_parts if p.kind == "discrete")
        if spec.mask_dim != choices:
            raise ConfigError(f"observation key 'action_mask' has {spec.mask_dim} entries, but the action space "
                              f"{action_space} has {choices} discrete choices: one 0/1 per choice")
    return spec


def image_shape(spec: SpaceSpec) -> tuple[int, int, int, bool] | None:
    """(channels, height, width, channels_last) of a Box observation of 2 or 3 dims that a
    CNN can take, else None. 2 dims are one channel; of 3, the smaller end axis holds the
    channels ((4, 84, 84): channels first; (210, 160, 3): channels last)."""
    shape = spec.obs_shape
    if spec.obs_kind != "box" or len(shape) not in (2, 3):
        return None
    if len(shape) == 2:
        return 1, shape[0], shape[1], False
    if shape[0] < shape[-1]:
        return shape[0], shape[1], shape[2], False
    return shape[2], shape[0], shape[1], True


def looks_like_image(spec: SpaceSpec) -> bool:
    """An image observation, which gets a CNN by default: a Box of 2 or 3 dims whose
    height and width are at least 32 (8 for uint8 pixels), with at most 16 channels."""
    dims = image_shape(spec)
    if dims is None:
        return False
    channels, height, width, _ = dims
    least = 8 if spec.obs_dtype == "uint8" else 32
    return channels <= 16 and min(height, width) >= least


class ObsEncoder:
    """Writes raw observations into rows of a flat float32 array (uint8 for byte rows)."""

    def __init__(self, spec: SpaceSpec):
        self.spec = spec
        self.kind = spec.obs_kind
        self.dim = spec.obs_dim
        self._struct = StructWriter(spec.obs_parts, spec.mask_dim, [
            p.size for p in spec.action_parts if p.kind == "discrete"]) if self.kind == "struct" else None

    def write(self, out: np.ndarray, row: int, obs: Any) -> None:
        """One observation into out[row]; ValueError if it does not fit the space (a
        Discrete one outside 0..n-1, a Box one of another size, a struct one missing a
        part or masking every action)."""
        if self._struct is not None:
            self._struct.write(out[row], obs)
        elif self.kind == "discrete":
            k = int(obs)
            if not 0 <= k < self.dim:
                raise ValueError(f"observation {k} is outside Discrete({self.dim})")
            out[row] = 0.0
            out[row, k] = 1.0
        elif out.dtype == np.uint8:  # bytes stay bytes (no float copy of a frame)
            out[row] = np.asarray(obs).reshape(self.dim)
        else:
            out[row] = np.asarray(obs, dtype=np.float32).reshape(self.dim)

    def encode(self, obs: Any) -> np.ndarray:
        out = np.zeros((1, self.dim), np.float32)
        self.write(out, 0, obs)
        return out[0]


def env_action(spec: SpaceSpec, actions: np.ndarray) -> list[Any]:
    """Turn a batch of model actions into what each sub-env's step() takes (Box actions
    clipped to the space's bounds)."""
    if spec.act_kind == "discrete":
        return actions.tolist()
    if spec.act_kind == "multi":
        to_env = _action_tree(spec.act_tree, spec.act_low, spec.act_high).to_env
        return [to_env(row) for row in actions]
    clipped = np.clip(actions, np.asarray(spec.act_low, np.float32), np.asarray(spec.act_high, np.float32))
    return [row.reshape(spec.act_shape) for row in clipped]


@functools.lru_cache(maxsize=16)
def _action_tree(tree: Any, low: tuple[float, ...], high: tuple[float, ...]) -> ActionTree:
    return ActionTree(tree, low, high)


@dataclasses.dataclass(frozen=True)
class ActionSlice:
    """Where one action leaf lives: its logits (discrete) or means (box) `out[lo:hi]`, its
    columns of a stored action `col[:cols]`, and (box) its bounds and log std from `box`."""

    kind: str
    lo: int
    hi: int
    col: int
    cols: int
    box: int


def action_slices(spec: SpaceSpec) -> list[ActionSlice]:
    """The leaves of `spec`'s action, in order (one for Discrete and Box)."""
    out, lo, col, box = [], 0, 0, 0
    for part in spec.action_parts:
        cols = 1 if part.kind == "discrete" else part.size
        out.append(ActionSlice(part.kind, lo, lo + part.size, col, cols, box))
        lo += part.size
        col += cols
        if part.kind == "box":
            box += part.size
    return out


def masked_logit_columns(spec: SpaceSpec) -> list[int]:
    """The logit columns the action mask's columns stand for, in order (every discrete
    leaf's choices)."""
    return [c for s in action_slices(spec) if s.kind == "discrete" for c in range(s.lo, s.hi)]
