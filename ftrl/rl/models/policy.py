"""Policy inference on env runners: the actor-critic MLP's forward pass, batched.

Two backends compute the same thing from the same flat weight vector:
- "numpy" (default): plain numpy matmuls. Env runner processes then never import
  torch (0.5 s and ~55 MB to start instead of ~2.9 s and ~240 MB), so a runner that was
  killed comes back fast and cheap, and for the small MLPs used here one numpy forward
  is faster than one torch forward.
- "torch": the learner's own model (`ftrl.rl.models.factory.build_model`) under
  `torch.inference_mode()`.

Only the fully connected model has a numpy forward: for a CNN or a custom model the
runners use torch whatever `inference_backend` says (`make_policy` logs it once).

The flat weight layout of the MLP is defined once, by `flat_layout`, and shared by the
torch model (`ActorCritic.get_flat/set_flat`) and `NumpyPolicy`.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np

from ftrl.config import ModelConfig
from ftrl.rl.models.kinds import model_kind
from ftrl.rl.models.layout import flat_layout
from ftrl.rl.space_parts import MASKED_LOGIT
from ftrl.rl.spaces import SpaceSpec, action_slices, masked_logit_columns
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

_LOG_2PI = math.log(2 * math.pi)

# Discrete actions are sampled by an exponential race: argmax of p_i / E_i with E_i ~ Exp(1)
# picks i with probability p_i. The draws are float64: a float32 draw is exactly 0 once in
# ~2^23, and 0 / 0 (an action whose probability underflowed to 0 in float32, e.g. a
# log-prob of -200) was then sampled, with numpy's divide-by-zero warning (float64: once
# in ~2^53).




def _activation(name: str) -> Any:
    if name == "tanh":
        return np.tanh
    if name == "relu":
        return lambda x: np.maximum(x, 0.0, out=x)
    if name == "elu":
        return lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))
    return lambda x: x


class NumpyPolicy:
    """The MLP actor-critic's inference in numpy (float32)."""

    backend = "numpy"
    recurrent = False

    def __init__(self, spec: SpaceSpec, model: ModelConfig | None = None, seed: int | None = None):
        self.spec = spec
        self.model = model or ModelConfig()
        self.layout = flat_layout(spec, self.model)
        self.discrete = spec.act_kind == "discrete"
        self._slices = action_slices(spec)
        columns = masked_logit_columns(spec)
        # None: the mask covers every logit, in order (a Discrete action)
        self._mask_columns = None if columns == list(range(spec.act_dim)) else np.asarray(columns)
        self.share = self.model.vf_share_layers
        self.n_hidden = len(self.model.fcnet_hiddens)
        self.act_fn = _activation(self.model.fcnet_activation)
        self.rng = np.random.default_rng(seed)
        self._params: dict[str, np.ndarray] = {}
        self.set_flat(self._initial_weights())

    def _initial_weights(self) -> np.ndarray:
        """Small random weights (the driver replaces them before any sample counts)."""
        parts = []
        for name, shape in self.layout:
            if name.endswith("weight"):
                fan_in = shape[1]
                gain = 0.01 if name.startswith("pi_head") else 1.0
                parts.append(self.rng.normal(0.0, gain / math.sqrt(fan_in), shape).astype(np.float32).reshape(-1))
            else:
                parts.append(np.zeros(int(np.prod(shape)), np.float32))
        return np.concatenate(parts)

    def num_params(self) -> int:
        return sum(int(np.prod(shape)) for _, shape in self.layout)

    def set_flat(self, flat: np.ndarray) -> None:
        """Load a flat float32 vector laid out by `flat_layout`."""
        flat = np.asarray(flat, dtype=np.float32).reshape(-1)
        if flat.size != self.num_params():
            raise ValueError(f"weights have {flat.size} values; this model has {self.num_params()} parameters")
        if not np.isfinite(flat).all():
            raise ValueError("weights contain NaN or inf")
        params, offset = {}, 0
        for name, shape in self.layout:
            n = int(np.prod(shape))
            params[name] = flat[offset : offset + n].reshape(shape).copy()
            offset += n
        # pre-transposed weights: x @ W.T without a transpose per call
        self._pi = [(params[f"pi_body.{2 * k}.weight"].T.copy(), params[f"pi_body.{2 * k}.bias"]) for k in range(self.n_hidden)]
        self._vf = (
            []
            if self.share
            else [(params[f"vf_body.{2 * k}.weight"].T.copy(), params[f"vf_body.{2 * k}.bias"]) for k in range(self.n_hidden)]
        )
        self._pi_head = (params["pi_head.weight"].T.copy(), params["pi_head.bias"])
        self._vf_head = (params["vf_head.weight"].T.copy(), params["vf_head.bias"])
        self._log_std = params.get("log_std")
        self._params = params

    def get_flat(self) -> np.ndarray:
        return np.concatenate([self._params[name].reshape(-1) for name, _ in self.layout]).astype(np.float32)

    def _body(self, x: np.ndarray, layers: list) -> np.ndarray:
        for w, b in layers:
            x = self.act_fn(x @ w + b)
        return x

    def _forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits or means, values); masked choices' logits pushed to a huge negative."""
        x = np.asarray(obs, np.float32)
        mask_dim = self.spec.mask_dim
        if mask_dim:
            x, allowed = x[:, : x.shape[1] - mask_dim], x[:, x.shape[1] - mask_dim:] > 0
        h = self._body(x, self._pi)
        hv = h if self.share else self._body(x, self._vf)
        out = h @ self._pi_head[0] + self._pi_head[1]
        values = (hv @ self._vf_head[0] + self._vf_head[1])[:, 0]
        if mask_dim:
            if self._mask_columns is None:
                out[~allowed] = MASKED_LOGIT
            else:
                sub = out[:, self._mask_columns]
                sub[~allowed] = MASKED_LOGIT
                out[:, self._mask_columns] = sub
        return out, values

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) for a batch [B, obs_dim] -> [B] float32."""
        x = np.asarray(obs, np.float32)
        if self.spec.mask_dim:
            x = x[:, : x.shape[1] - self.spec.mask_dim]
        hv = self._body(x, self._pi if self.share else self._vf)
        return (hv @ self._vf_head[0] + self._vf_head[1])[:, 0]

    def _categorical(self, out: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        z = out - out.max(axis=1, keepdims=True)
        logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        if explore:
            actions = (np.exp(logp_all) / self.rng.standard_exponential(out.shape)).argmax(axis=1)
        else:
            actions = out.argmax(axis=1)
        return actions.astype(np.int64), logp_all[np.arange(out.shape[0]), actions].astype(np.float32)

    def _gaussian(self, out: np.ndarray, log_std: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        std = np.exp(log_std)
        actions = out + std * self.rng.standard_normal(out.shape, np.float32) if explore else out
        logp = (-0.5 * ((actions - out) / std) ** 2 - log_std - 0.5 * _LOG_2PI).sum(axis=1)
        return actions.astype(np.float32), logp.astype(np.float32)

    def act(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Actions (sampled, or the mode), their log-probs and values for a batch."""
        out, values = self._forward(obs)
        if self.spec.act_kind == "multi":
            columns, logp = [], np.zeros(out.shape[0], np.float32)
            for s in self._slices:
                if s.kind == "discrete":
                    a, lp = self._categorical(out[:, s.lo: s.hi], explore)
                    columns.append(a[:, None])
                else:
                    a, lp = self._gaussian(out[:, s.lo: s.hi], self._log_std[s.box: s.box + s.cols], explore)
                    columns.append(a)
                logp += lp
            return np.concatenate(columns, axis=1).astype(self.spec.action_dtype), logp, values
        if self.discrete:
            return (*self._categorical(out, explore), values)
        return (*self._gaussian(out, self._log_std, explore), values)

    def act_into(self, obs: np.ndarray, explore: bool, actions: np.ndarray, logp: np.ndarray, values: np.ndarray) -> None:
        """`act`, written into the given rows (a fragment's arrays at one step): what a
        sampler records, without a copy per output (same values as `act`)."""
        if not self.discrete or actions.dtype != np.intp:
            actions[...], logp[...], values[...] = self.act(obs, explore)
            return
        out, v = self._forward(obs)
        values[...] = v
        z = out - out.max(axis=1, keepdims=True)
        logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        if explore:
            (np.exp(logp_all) / self.rng.standard_exponential(out.shape)).argmax(axis=1, out=actions)
        else:
            out.argmax(axis=1, out=actions)
        logp[...] = logp_all[np.arange(out.shape[0]), actions]


class TorchPolicy:
    """The learner's torch model (`build_model`) used for inference (imports torch), on
    `device` ("cpu", or "cuda" for a runner given a GPU: observations go there as they
    are, uint8 pixels included, and actions, log-probs and values come back)."""

    backend = "torch"

    def __init__(self, spec: SpaceSpec, model: ModelConfig | None = None, seed: int | None = None,
                 device: str = "cpu"):
        import torch

        from ftrl.rl.models.factory import build_model

        self._torch = torch
        if seed is not None:
            torch.manual_seed(seed)
        self.spec = spec
        self.device = torch.device(device)
        self.model = build_model(spec, model).to(self.device)
        self.model.eval()

    def _in(self, array: np.ndarray) -> Any:
        """A host array as a tensor on the policy's device (no copy on the CPU)."""
        return self._torch.from_numpy(array).to(self.device, non_blocking=True)

    def num_params(self) -> int:
        return self.model.num_params()

    def set_flat(self, flat: np.ndarray) -> None:
        self.model.set_flat(flat)

    def get_flat(self) -> np.ndarray:
        return self.model.get_flat()

    def value(self, obs: np.ndarray) -> np.ndarray:
        with self._torch.inference_mode():
            return self.model.value(self._in(_rows(obs))).cpu().numpy()

    def act(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with self._torch.inference_mode():
            a, lp, v = self.model.act(self._in(_rows(obs)), explore)
        return a.cpu().numpy(), lp.cpu().numpy(), v.cpu().numpy()

    def act_into(self, obs: np.ndarray, explore: bool, actions: np.ndarray, logp: np.ndarray, values: np.ndarray) -> None:
        """`act`, written into the given rows."""
        actions[...], logp[...], values[...] = self.act(obs, explore)

    # ---- recurrent models (`use_lstm`): a state per row, advanced one step per call

    @property
    def recurrent(self) -> bool:
        return bool(getattr(self.model, "recurrent", False))

    def initial_state(self, batch: int) -> np.ndarray:
        return self.model.initial_state(batch).cpu().numpy()

    def act_step(self, obs: np.ndarray, state: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray,
                 explore: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Actions, log-probs, values and the next state for one step of every row."""
        t = self._torch
        with t.inference_mode():
            a, lp, v, new_state = self.model.act_step(
                self._in(_rows(obs)), self._in(np.ascontiguousarray(state)),
                self._in(np.ascontiguousarray(prev_action)), self._in(np.ascontiguousarray(prev_reward)), explore)
        return a.cpu().numpy(), lp.cpu().numpy(), v.cpu().numpy(), new_state.cpu().numpy()

    def value_step(self, obs: np.ndarray, state: np.ndarray, prev_action: np.ndarray,
                   prev_reward: np.ndarray) -> np.ndarray:
        """V(obs) of every row, from its state."""
        with self._torch.inference_mode():
            return self.model.step(self._in(_rows(obs)), self._in(np.ascontiguousarray(state)),
                                   self._in(np.ascontiguousarray(prev_action)),
                                   self._in(np.ascontiguousarray(prev_reward)))[1].cpu().numpy()


def _rows(obs: np.ndarray) -> np.ndarray:
    """Observation rows for a torch model: uint8 ones as they are (the model makes them
    float), the others float32."""
    obs = np.asarray(obs)
    return np.ascontiguousarray(obs) if obs.dtype == np.uint8 else np.ascontiguousarray(obs, np.float32)


def inference_device(gpus: float) -> str:
    """Where a runner given `gpus` (`num_gpus_per_env_runner`) infers: "cpu" without, else
    "cuda" (the GPU its worker gave it, cuda:0 of its CUDA_VISIBLE_DEVICES); ConfigError
    when this process sees no CUDA device."""
    if not gpus:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"num_gpus_per_env_runner={gpus:g}, but this runner sees no CUDA device "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); set it to 0 "
                          "to infer on the CPU")
    return "cuda"


def make_policy(backend: str, spec: SpaceSpec, model: ModelConfig | None = None, seed: int | None = None,
                device: str = "cpu") -> NumpyPolicy | TorchPolicy:
    """The inference policy for `env_runners(inference_backend=...)`; "numpy" becomes
    "torch" for a model with no numpy forward (a CNN or a custom model), and on a GPU
    (`device` "cuda")."""
    model = model or ModelConfig()
    kind = "recurrent" if model.use_lstm else model_kind(spec, model)
    if backend == "numpy" and (kind != "fc" or device != "cpu"):
        log.info("inference_backend 'numpy' runs only the fully connected model on the CPU: the %s model "
                 "infers with torch on %s", kind, device)
        backend = "torch"
    if backend == "numpy":
        return NumpyPolicy(spec, model, seed)
    if backend == "torch":
        return TorchPolicy(spec, model, seed, device)
    raise ValueError(f"unknown inference backend {backend!r}")
