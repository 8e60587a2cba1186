"""A trained policy as one file that runs without ftrl: TorchScript (`torch.jit.load`) or
ONNX (`onnxruntime`).

    path = export_policy(model, spec, filter_affine, "out/", "onnx")   # out/policy.onnx

The graph takes raw observations, a batch as the env gives them (float32, or uint8
pixels; a Discrete observation as its int index), applies the observation filter the
policy was trained with (folded in as constants: `clip((x - mean) / std, -clip, clip)`)
and returns `(logits, action)`: the model's logits (Box actions: the action means) and
the greedy action (the argmax; Box actions: the means clipped to the space's bounds),
as `compute_actions(..., explore=False)` gives them. Input `obs`, outputs `logits` and
`action`, the batch dimension dynamic.

A Dict or Tuple observation goes in as the flat float32 row ftrl encodes it into
(`ftrl.rl.spaces.ObsEncoder`: the leaves side by side in the space's order, Discrete ones
one-hot, the `action_mask` last): the mask is applied in the graph (a masked choice is
never the action). A structured action comes out as one row per observation: a column
per discrete leaf (its argmax) and the clipped means of each Box leaf, in order.

A recurrent policy (`use_lstm`, or a custom recurrent model) takes three more inputs and
gives one more output, one step at a time: `(obs, state_in [B, S], prev_action,
prev_reward [B]) -> (logits, action, state_out [B, S])`. The state is the flat row
`get_initial_state()` gives (at an episode's start: the row written beside the file as
`initial_state.npy`, zeros for `use_lstm`); `prev_action` the previous step's action as a
batch stores it (int64 [B] for Discrete, the action row otherwise; zeros at an episode's
start), `prev_reward` the previous reward (zero at an episode's start).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ftrl.rl.spaces import SpaceSpec, action_slices
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

FORMATS = {"torchscript": "policy.pt", "onnx": "policy.onnx"}


class GreedyPolicy(nn.Module):
    """Raw observations -> (logits, greedy action): the filter, the model and the action
    head in one module (what gets exported)."""

    def __init__(self, model: nn.Module, spec: SpaceSpec, affine: tuple[np.ndarray, np.ndarray, Any] | None):
        super().__init__()
        self.model = model
        self.obs_dim = int(spec.obs_dim)
        self.discrete_obs = spec.obs_kind == "discrete"
        self.discrete_act = spec.act_kind == "discrete"
        self.slices = action_slices(spec) if spec.act_kind == "multi" else []
        self.filtered = affine is not None
        mean, inv_std, clip = affine if affine is not None else (np.zeros(1), np.ones(1), 0.0)
        mean = np.asarray(mean, np.float32).reshape(-1)
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("inv_std", torch.as_tensor(np.asarray(inv_std, np.float32).reshape(-1)))
        bound = np.broadcast_to(np.asarray(clip, np.float32).reshape(-1), mean.shape).copy()
        self.register_buffer("bound", torch.as_tensor(bound))  # per column (inf: a column left raw)
        low = np.asarray(spec.act_low or [0.0], np.float32).reshape(-1)
        high = np.asarray(spec.act_high or [0.0], np.float32).reshape(-1)
        self.register_buffer("low", torch.as_tensor(low))
        self.register_buffer("high", torch.as_tensor(high))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, _ = self.model._outputs(self._filtered(obs))
        return logits, self._greedy(logits)

    def _filtered(self, obs: torch.Tensor) -> torch.Tensor:
        if self.discrete_obs:
            x = nn.functional.one_hot(obs.reshape(-1).long(), self.obs_dim).float()
        else:
            x = obs.reshape(obs.shape[0], self.obs_dim).float()
        if self.filtered:
            x = torch.maximum(torch.minimum((x - self.mean) * self.inv_std, self.bound), -self.bound)
        return x

    def _greedy(self, logits: torch.Tensor) -> torch.Tensor:
        if self.slices:
            return self._greedy_parts(logits)
        if self.discrete_act:
            return logits.argmax(dim=-1)
        return torch.maximum(torch.minimum(logits, self.high), self.low)

    def _greedy_parts(self, logits: torch.Tensor) -> torch.Tensor:
        columns = []
        for s in self.slices:
            out = logits[:, s.lo: s.hi]
            if s.kind == "discrete":
                columns.append(out.argmax(dim=-1, keepdim=True).to(logits.dtype))
            else:
                high, low = self.high[s.box: s.box + s.cols], self.low[s.box: s.box + s.cols]
                columns.append(torch.maximum(torch.minimum(out, high), low))
        return torch.cat(columns, dim=-1)


class RecurrentGreedyPolicy(GreedyPolicy):
    """One step of a recurrent policy: (obs, state_in, prev_action, prev_reward) ->
    (logits, greedy action, state_out)."""

    def forward(self, obs: torch.Tensor, state_in: torch.Tensor, prev_action: torch.Tensor,  # type: ignore[override]
                prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, _, state_out = self.model.step(self._filtered(obs), state_in, prev_action, prev_reward)
        return logits, self._greedy(logits), state_out


def example_batch(spec: SpaceSpec, n: int = 2) -> torch.Tensor:
    """A batch of `n` observations of the right shape and dtype (what tracing feeds)."""
    if spec.obs_kind == "discrete":
        return torch.zeros(n, dtype=torch.int64)
    dtype = torch.uint8 if spec.obs_dtype == "uint8" else torch.float32
    return torch.zeros((n, *spec.obs_shape), dtype=dtype)


def example_inputs(model: nn.Module, spec: SpaceSpec, n: int = 2) -> tuple[torch.Tensor, ...]:
    """What tracing feeds: a batch of observations, and for a recurrent model its initial
    states, previous actions and rewards."""
    obs = example_batch(spec, n)
    if not getattr(model, "recurrent", False):
        return (obs,)
    action = torch.from_numpy(np.zeros((n, *spec.action_row_shape), spec.action_dtype))
    return obs, model.initial_state(n), action, torch.zeros(n)


def random_batch(spec: SpaceSpec, n: int, seed: int = 0) -> np.ndarray:
    """`n` random observations of the space's shape and dtype (the export's self-check)."""
    rng = np.random.default_rng(seed)
    if spec.obs_kind == "discrete":
        return rng.integers(0, spec.obs_dim, n)
    if spec.obs_dtype == "uint8":
        return rng.integers(0, 256, (n, *spec.obs_shape), dtype=np.uint8)
    return rng.normal(size=(n, *spec.obs_shape)).astype(np.float32)


def export_policy(model: nn.Module, spec: SpaceSpec, affine: tuple[np.ndarray, np.ndarray, Any] | None,
                  directory: str | Path, fmt: str, model_name: str = "") -> Path:
    """Write the greedy policy of `model` to DIRECTORY/policy.pt (TorchScript) or
    DIRECTORY/policy.onnx; its path. The file is checked before it replaces an older one:
    run on a batch of another size, it must give the module's own logits and actions (a
    trace that froze data-dependent Python would not). ConfigError for an unknown format,
    or a model that cannot be traced or exported (naming `model_name` and the format)."""
    if fmt not in FORMATS:
        raise ConfigError(f"export format {fmt!r} is not one of {sorted(FORMATS)}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / FORMATS[fmt]
    recurrent = bool(getattr(model, "recurrent", False))
    policy = (RecurrentGreedyPolicy if recurrent else GreedyPolicy)(model, spec, affine).eval()
    for p in policy.parameters():
        p.requires_grad_(False)
    example = example_inputs(model, spec)
    what = model_name or type(model).__name__
    tmp = path.with_name(path.name + ".tmp")
    try:
        with torch.no_grad():
            if fmt == "torchscript":
                traced = torch.jit.trace(policy, example, check_trace=False)
                torch.jit.save(traced, str(tmp))
            else:
                _export_onnx(policy, example, tmp)
        _check_exported(policy, spec, tmp, fmt)
        if recurrent:
            write_initial_state(out / "initial_state.npy", model.initial_state(1)[0].numpy())
    except ConfigError:
        tmp.unlink(missing_ok=True)
        raise
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot export model {what} as {fmt}: {type(e).__name__}: {e}") from e
    tmp.replace(path)
    return path


def _check_exported(policy: GreedyPolicy, spec: SpaceSpec, path: Path, fmt: str) -> None:
    """The exported file gives the module's own outputs on a fresh batch (ValueError)."""
    if fmt == "onnx":
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            log.warning("onnxruntime is not installed: %s is not checked against the model", path)
            return
    obs = random_batch(spec, 3, seed=1)
    run = load_exported(path, fmt)
    if not isinstance(policy, RecurrentGreedyPolicy):
        with torch.no_grad():
            want = [t.numpy() for t in policy(torch.as_tensor(obs))]
        _same(spec, run(obs), want)
        return
    inputs = [t.numpy() for t in example_inputs(policy.model, spec, 3)][1:]
    for _ in range(3):  # three steps, each from the state the last gave
        with torch.no_grad():
            want = [t.numpy() for t in policy(torch.as_tensor(obs), *map(torch.as_tensor, inputs))]
        got = run(obs, *inputs)
        _same(spec, got, want)
        inputs = [np.asarray(got[2]), np.asarray(want[1], inputs[1].dtype).reshape(inputs[1].shape),
                  np.ones(3, np.float32)]


def _same(spec: SpaceSpec, got: Any, want: Any) -> None:
    same_logits = np.allclose(got[0], want[0], rtol=1e-3, atol=1e-4)
    same_actions = spec.act_kind == "box" or np.array_equal(np.asarray(got[1]), want[1])
    same_state = len(want) < 3 or np.allclose(got[2], want[2], rtol=1e-3, atol=1e-4)
    if not (same_logits and same_actions and same_state):
        raise ValueError("the exported graph does not reproduce the model on a new batch (Python control "
                         "flow or numpy in forward() depends on the data: it was frozen by the trace)")


def write_initial_state(path: Path, state: np.ndarray) -> None:
    """`initial_state.npy` beside a recurrent export, written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, np.asarray(state, np.float32))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _export_onnx(policy: GreedyPolicy, example: tuple[torch.Tensor, ...], path: Path) -> None:
    try:
        import onnxscript  # noqa: F401  (torch's ONNX exporter needs it)
    except ImportError:
        raise ConfigError("format 'onnx' needs the onnx and onnxscript packages: "
                          "pip install 'ftrl[export]'") from None
    batch = torch.export.Dim("batch", min=1)
    shapes = tuple({0: batch} for _ in example)
    recurrent = len(example) > 1
    inputs = ["obs", "state_in", "prev_action", "prev_reward"] if recurrent else ["obs"]
    outputs = ["logits", "action", "state_out"] if recurrent else ["logits", "action"]
    torch.onnx.export(policy, example, str(path), input_names=inputs, output_names=outputs,
                      dynamic_shapes=shapes, dynamo=True, verbose=False, optimize=True, external_data=False)


def load_exported(path: str | Path, fmt: str | None = None) -> Any:
    """A callable `obs -> (logits, action)` (a recurrent policy's: `(obs, state_in,
    prev_action, prev_reward) -> (logits, action, state_out)`; numpy in and out) over an
    exported file, for tests and for a check beside ftrl's own actions (`fmt`: by the
    file's suffix if None)."""
    path = Path(path)
    if (fmt or ("onnx" if path.suffix == ".onnx" else "torchscript")) == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return lambda *inputs: tuple(session.run(None, {n: np.asarray(x) for n, x in zip(names, inputs, strict=True)}))
    module = torch.jit.load(str(path))

    def run(*inputs: Any) -> tuple[np.ndarray, ...]:
        with torch.no_grad():
            return tuple(t.numpy() for t in module(*(torch.as_tensor(np.asarray(x)) for x in inputs)))

    return run
