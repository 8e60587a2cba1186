"""Which network a `model` dict and an observation space give, decided without torch
(so the numpy runner and the CLI's early checks can ask).

- `custom_model` set: the user's module ("custom").
- `conv_filters=[]`: fully connected ("fc"); on image observations a ConfigError that
  suggests `conv_filters` (an MLP on pixels does not learn).
- `conv_filters` set, or `conv_type="impala"`: a CNN ("cnn"); the observation must be a
  Box of 2 or 3 dims.
- neither: a CNN on image observations (`ftrl.rl.spaces.looks_like_image`), as RLlib
  does, else fully connected.
- a Dict or Tuple observation holding images ("struct"): a CNN per image leaf (the
  conv keys apply to each) and an MLP over the other leaves, side by side; without
  images, fully connected over all its leaves.

`conv_plan` lays the CNN out over the image (the default filters for its size, the
output of the conv body), and raises a ConfigError naming `conv_filters` when the image
is too small for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftrl.config import ModelConfig
from ftrl.rl.space_parts import MASK_KEY, ObsPart
from ftrl.rl.spaces import SpaceSpec, image_shape, looks_like_image
from ftrl.wire.errors import ConfigError

#: Mnih et al. 2015 (the Nature DQN), for images of at least 36x36
NATURE_FILTERS = [[32, 8, 4], [64, 4, 2], [64, 3, 1]]
#: smaller images (down to 7x7)
SMALL_FILTERS = [[16, 3, 2], [32, 3, 2]]
#: Espeholt et al. 2018: three stacks of 16, 32, 32 channels (conv 3x3, max-pool stride 2)
IMPALA_FILTERS = [[16, 3, 2], [32, 3, 2], [32, 3, 2]]


def model_kind(spec: SpaceSpec, model: ModelConfig) -> str:
    """"fc", "cnn", "struct" or "custom" for these spaces; ConfigError for a combination that
    cannot work."""
    if model.custom_model:
        return "custom"
    if spec.obs_kind == "struct":
        return _struct_kind(spec, model)
    if model.conv_filters == []:
        if model.conv_type == "impala":
            raise ConfigError("model conv_filters=[] (fully connected) contradicts conv_type='impala': "
                              "leave conv_filters unset for the IMPALA ResNet's default stacks")
        if looks_like_image(spec):
            raise ConfigError(
                f"model conv_filters=[] asks for the fully connected model, but the observations "
                f"are images of shape {spec.obs_shape}: leave conv_filters unset for the default "
                "CNN, or set conv_filters=[[out_channels, kernel, stride], ...] (e.g. "
                "[[32, 8, 4], [64, 4, 2], [64, 3, 1]]), or conv_type='impala'"
            )
        return "fc"
    explicit = model.conv_filters is not None or model.conv_type == "impala"
    if explicit:
        if image_shape(spec) is None:
            what = "conv_filters" if model.conv_filters is not None else "conv_type='impala'"
            raise ConfigError(
                f"model {what} needs image observations (a Box of 2 or 3 dims), but they are "
                f"{spec.obs_kind} of shape {spec.obs_shape}: drop {what} for the fully connected model"
            )
        return "cnn"
    return "cnn" if looks_like_image(spec) else "fc"


def leaf_spec(part: ObsPart) -> SpaceSpec:
    """A leaf of a structured observation as an observation of its own (for `image_shape`)."""
    return SpaceSpec(part.kind, part.shape, part.dim, "discrete", (), 1, obs_dtype=part.dtype)


def image_leaves(spec: SpaceSpec) -> list[ObsPart]:
    """The leaves of a structured observation that look like images (each gets a CNN)."""
    return [p for p in spec.obs_parts if p.path != MASK_KEY and looks_like_image(leaf_spec(p))]


def _struct_kind(spec: SpaceSpec, model: ModelConfig) -> str:
    images = image_leaves(spec)
    explicit = model.conv_filters or model.conv_type == "impala"
    if model.conv_filters == [] and images:
        raise ConfigError(f"model conv_filters=[] asks for the fully connected model, but the observation's "
                          f"{', '.join(repr(p.path) for p in images)} are images: leave conv_filters unset for "
                          "a CNN on each")
    if images:
        return "struct"
    if explicit:
        raise ConfigError("model conv_filters / conv_type='impala' need an image in the observation, but no "
                          f"part of it is one ({', '.join(f'{p.path} {p.shape}' for p in spec.obs_parts)}): drop them")
    return "fc"


def needs_torch(spec: SpaceSpec, model: ModelConfig) -> bool:
    """Whether the model has no numpy forward (only the fully connected one without an
    LSTM has)."""
    return model_kind(spec, model) != "fc" or model.use_lstm


@dataclass(frozen=True)
class ConvPlan:
    """A CNN over one image observation."""

    channels: int
    height: int
    width: int
    channels_last: bool
    impala: bool
    filters: list[list[int]]  # [out_channels, kernel, stride] per conv (impala: per stack)
    post_hiddens: list[int]
    out_shape: tuple[int, int, int]  # (channels, height, width) after the conv body


def _out_size(size: int, kernel: int, stride: int, impala: bool) -> int:
    if impala:  # conv `kernel` with same padding, then max-pool 3x3 of `stride`, padding 1
        return (size - 1) // stride + 1
    return (size - kernel) // stride + 1  # valid padding


def _body_out(height: int, width: int, filters: list[list[int]], impala: bool) -> tuple[int, int]:
    for _, kernel, stride in filters:
        height, width = _out_size(height, kernel, stride, impala), _out_size(width, kernel, stride, impala)
    return height, width


def conv_plan(spec: SpaceSpec, model: ModelConfig) -> ConvPlan:
    """The CNN for this image observation; ConfigError if `conv_filters` do not fit it."""
    dims = image_shape(spec)
    if dims is None:
        raise ConfigError(f"a CNN needs image observations (a Box of 2 or 3 dims), got shape {spec.obs_shape}")
    channels, height, width, channels_last = dims
    impala = model.conv_type == "impala"
    if model.conv_filters:
        filters = [list(map(int, f)) for f in model.conv_filters]
    elif impala:
        filters = IMPALA_FILTERS
    else:
        nature_fits = min(_body_out(height, width, NATURE_FILTERS, False)) >= 1
        filters = NATURE_FILTERS if nature_fits else SMALL_FILTERS
    if impala and any(kernel % 2 == 0 for _, kernel, _ in filters):
        raise ConfigError(f"model conv_filters with conv_type='impala' need odd kernels (same padding), got {filters}")
    out_h, out_w = _body_out(height, width, filters, impala)
    if min(out_h, out_w) < 1:
        raise ConfigError(
            f"model conv_filters {filters} shrink the {height}x{width} observation to nothing: "
            "set conv_filters with smaller kernels or strides (e.g. [[16, 3, 1], [32, 3, 1]])"
        )
    post = list(model.post_fcnet_hiddens) if model.post_fcnet_hiddens else ([256] if impala else [512])
    return ConvPlan(channels, height, width, channels_last, impala, filters, post,
                    (filters[-1][0], out_h, out_w))
