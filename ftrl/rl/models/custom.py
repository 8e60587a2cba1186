"""A user's own torch module as the actor-critic (`model={"custom_model": "pkg.mod:Net",
"custom_model_config": {...}}`).

The interface, all a custom model writes:

    class Net(torch.nn.Module):
        def __init__(self, obs_shape: tuple[int, ...], num_outputs: int, **custom_model_config): ...
        def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
            # obs: [B, *obs_shape] float32, as the env gives it (uint8 pixels are not
            # scaled: divide by 255 yourself); returns (logits [B, num_outputs], value [B])

`obs_shape` is the observation's shape (Discrete observations: (n,), one-hot). A Dict
or Tuple observation comes as nested dicts of tensors, one per leaf: `obs["image"]`
[B, H, W, C], `obs["pos"]["x"]` [B, 3] (a Tuple's items under the keys "0", "1", ...;
Discrete leaves one-hot [B, n]), and `obs_shape` is the same nesting of the leaves'
shapes; the `action_mask` is not among them (the adapter applies it to the logits);
`num_outputs` the number of actions (Discrete; MultiDiscrete and Tuple/Dict actions: the
logits of every discrete leaf and the means of every Box leaf, side by side) or the flat
action size (Box: the
outputs are the Gaussian's means; its log std is a learned, state-independent parameter
of the adapter, `init_log_std` and `free_log_std` as for the built-in models). Every
parameter of the module travels in the flat weight vector (buffers, e.g. batch norm
statistics, do not: use none that change).

`CustomActorCritic` adapts it to ftrl's model interface (act, evaluate, value, flat
weights). Building it checks the module: a path that does not import, not an
nn.Module class, a constructor that raises, or outputs of the wrong shape on a dummy
batch are each a ConfigError naming `custom_model`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ftrl.config import ModelConfig
from ftrl.config.user_code import import_user_class
from ftrl.rl.models.base import FlatActorCritic, Layout, action_log_std, named_layout
from ftrl.rl.space_parts import MASK_KEY, ObsPart
from ftrl.rl.spaces import SpaceSpec
from ftrl.wire.errors import ConfigError


def model_obs_shape(spec: SpaceSpec) -> Any:
    """The shape of one observation as a custom model gets it (nested dicts of shapes for
    a Dict or Tuple observation)."""
    if spec.obs_kind == "struct":
        return _nest({p.path: (p.dim,) if p.kind == "discrete" else p.shape for p in _leaves(spec)})
    if spec.obs_kind == "box" and spec.obs_shape:
        return tuple(spec.obs_shape)
    return (spec.input_dim,)


def _leaves(spec: SpaceSpec) -> list[ObsPart]:
    return [p for p in spec.obs_parts if p.path != MASK_KEY]


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"a/b": x, "c": y} -> {"a": {"b": x}, "c": y}."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *outer, last = path.split("/")
        node = out
        for key in outer:
            node = node.setdefault(key, {})
        node[last] = value
    return out


def load_custom_model(path: str) -> type[nn.Module]:
    """The class `custom_model` names; ConfigError if it does not import or is not an
    nn.Module class."""
    return import_user_class("model custom_model", path, nn.Module,
                             "a torch.nn.Module class (forward(obs) -> (logits, value))")


def keeps_state(cls: type[nn.Module]) -> bool:
    """Whether a custom model class is recurrent (it defines `get_initial_state`)."""
    return callable(getattr(cls, "get_initial_state", None))


def construct_module(cls: type[nn.Module], path: str, spec: SpaceSpec, model: ModelConfig) -> nn.Module:
    """`cls(obs_shape, num_outputs, **custom_model_config)`; ConfigError if it raises."""
    obs_shape, kwargs = model_obs_shape(spec), dict(model.custom_model_config)
    try:
        return cls(obs_shape, spec.act_dim, **kwargs)
    except Exception as e:
        raise ConfigError(
            f"model custom_model {path!r}: {cls.__name__}({obs_shape}, {spec.act_dim}, "
            f"**custom_model_config={kwargs!r}) raised {type(e).__name__}: {e}"
        ) from None


def checked_layout(model: nn.Module, path: str) -> Layout:
    """The adapter's layout; ConfigError when the user's module has no parameters."""
    layout = named_layout(model)
    if not layout:
        raise ConfigError(f"model custom_model {path!r} has no parameters")
    return layout


def module_input(spec: SpaceSpec, obs_shape: Any, rows: torch.Tensor, lead: tuple[int, ...]) -> Any:
    """Flat rows (the mask dropped) as the module takes them: [*lead, *obs_shape], or
    nested dicts of leaves [*lead, *leaf_shape]."""
    if spec.obs_kind != "struct":
        return rows.reshape(*lead, *obs_shape)
    leaves = {}
    for p in _leaves(spec):
        cols = rows[:, p.offset: p.offset + p.dim]
        leaves[p.path] = cols.reshape(*lead, p.dim) if p.kind == "discrete" else cols.reshape(*lead, *p.shape)
    return _nest(leaves)


class CustomActorCritic(FlatActorCritic):
    """The user's module (`self.net`) under ftrl's model interface."""

    def __init__(self, spec: SpaceSpec, model: ModelConfig):
        super().__init__()
        path = str(model.custom_model)
        self.spec = spec
        self.discrete = spec.act_kind == "discrete"
        self.obs_shape = model_obs_shape(spec)
        self.net = construct_module(load_custom_model(path), path, spec, model)
        self.feature_dim = spec.act_dim
        self.register_parameter("log_std", action_log_std(spec, model.init_log_std, model.free_log_std))
        self.layout = checked_layout(self, path)
        self._check_outputs(path)

    def _net_input(self, rows: torch.Tensor) -> Any:
        return module_input(self.spec, self.obs_shape, rows, (rows.shape[0],))

    def _net_outputs(self, obs: torch.Tensor) -> tuple[Any, Any]:
        out = self.net(self._net_input(obs))
        if isinstance(out, (tuple, list)) and len(out) == 3:
            raise TypeError("forward returned 3 outputs, (logits, value, state) as a recurrent model would, but "
                            "the class has no get_initial_state(): define it for a custom recurrent model "
                            "(forward(obs, state, seq_lens)), or write a stateless one and set use_lstm=True")
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(f"forward returned {type(out).__name__}, not (logits, value)")
        return out[0], out[1]

    def _check_outputs(self, path: str) -> None:
        """A dummy batch of 2 through the module: logits [2, num_outputs], value [2]."""
        want = f"(logits [B, {self.spec.act_dim}], value [B])"
        obs = torch.zeros(2, self.spec.input_dim)
        try:
            with torch.no_grad():
                logits, value = self._net_outputs(obs)
        except Exception as e:
            raise ConfigError(
                f"model custom_model {path!r}: forward on a batch of 2 observations of shape {self.obs_shape} "
                f"raised {type(e).__name__}: {e} (it must return {want})"
            ) from None
        shapes = tuple(getattr(t, "shape", None) for t in (logits, value))
        ok = (
            isinstance(logits, torch.Tensor)
            and isinstance(value, torch.Tensor)
            and tuple(logits.shape) == (2, self.spec.act_dim)
            and tuple(value.shape) in ((2,), (2, 1))
        )
        if not ok:
            got = tuple(None if s is None else tuple(s) for s in shapes)
            raise ConfigError(
                f"model custom_model {path!r}: forward on a batch of 2 returned shapes {got}; "
                f"it must return {want}, here logits (2, {self.spec.act_dim}) and value (2,)"
            )

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The module's first output (an LSTM wrapper builds it with num_outputs = its
        input size: the module's output feeds the LSTM)."""
        return self._net_outputs(obs)[0]

    def _forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = self._net_outputs(obs)
        return logits, value.reshape(-1)
