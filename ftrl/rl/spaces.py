"""Which spaces the models handle, and how observations become flat vectors.

Observations are encoded to flat float32 vectors: Box (any shape) is flattened,
Discrete becomes one-hot, MultiBinary becomes 0/1 floats. Actions may be Discrete or
Box. Any other space (Dict, Tuple, Text, Graph, MultiDiscrete...) is a ConfigError.
This module imports no torch, so sub-env child processes can use it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from ftrl.wire.errors import ConfigError


@dataclass(frozen=True)
class SpaceSpec:
    """What the model needs to know about an env's spaces (msgpack-able via to_dict)."""

    obs_kind: str  # "box" | "discrete" | "multibinary"
    obs_shape: tuple[int, ...]
    obs_dim: int
    act_kind: str  # "discrete" | "box"
    act_shape: tuple[int, ...]
    act_dim: int  # number of actions (discrete) or flat action size (box)
    act_low: tuple[float, ...] = ()
    act_high: tuple[float, ...] = ()
    #: "uint8" for byte observations (pixels: a CNN scales them to [0, 1]); "float32"
    #: for every other kind (all arrive as float32 rows)
    obs_dtype: str = "float32"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
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
        )

    @property
    def action_dtype(self) -> np.dtype:
        return np.dtype(np.int64) if self.act_kind == "discrete" else np.dtype(np.float32)


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
    else:
        raise ConfigError(
            f"observation space {observation_space} is not supported by the MLP model: use "
            "Box, Discrete or MultiBinary (flatten Dict/Tuple spaces with "
            "gymnasium.wrappers.FlattenObservation)"
        )
    if obs_dim <= 0:
        raise ConfigError(f"observation space {observation_space} has no dimensions")
    obs_dtype = "uint8" if obs_kind == "box" and observation_space.dtype == np.uint8 else "float32"
    if isinstance(action_space, gym.spaces.Discrete):
        if action_space.start != 0:
            raise ConfigError(f"Discrete action space must start at 0, got {action_space}")
        return SpaceSpec(obs_kind, obs_shape, obs_dim, "discrete", (), int(action_space.n),
                         obs_dtype=obs_dtype)
    if isinstance(action_space, gym.spaces.Box):
        if not np.issubdtype(action_space.dtype, np.floating):
            raise ConfigError(f"Box action space must have a float dtype, got {action_space.dtype}")
        shape = tuple(action_space.shape)
        dim = int(np.prod(shape)) if shape else 1
        low = tuple(float(x) for x in np.broadcast_to(action_space.low, shape).reshape(-1))
        high = tuple(float(x) for x in np.broadcast_to(action_space.high, shape).reshape(-1))
        return SpaceSpec(obs_kind, obs_shape, obs_dim, "box", shape, dim, low, high, obs_dtype)
    raise ConfigError(
        f"action space {action_space} is not supported: use Discrete (Categorical policy) "
        "or Box (diagonal Gaussian policy)"
    )


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
    """Writes raw observations into rows of a flat float32 array."""

    def __init__(self, spec: SpaceSpec):
        self.spec = spec
        self.kind = spec.obs_kind
        self.dim = spec.obs_dim

    def write(self, out: np.ndarray, row: int, obs: Any) -> None:
        """One observation into out[row]; ValueError if it does not fit the space (a
        Discrete one outside 0..n-1, a Box one of another size)."""
        if self.kind == "discrete":
            k = int(obs)
            if not 0 <= k < self.dim:
                raise ValueError(f"observation {k} is outside Discrete({self.dim})")
            out[row] = 0.0
            out[row, k] = 1.0
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
    clipped = np.clip(actions, np.asarray(spec.act_low, np.float32), np.asarray(spec.act_high, np.float32))
    return [row.reshape(spec.act_shape) for row in clipped]
