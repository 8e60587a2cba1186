"""Learner: what every algorithm's learner shares, knowing nothing of any algorithm.

An algorithm's learner (`PPOLearner` in ftrl/rl/algorithms/ppo.py) subclasses it and
writes `update()`: its loss and its minibatch loop. The base owns the rest:

- the model (`build_model`, by default `ftrl.rl.models.factory.build_model`'s) with all
  trainable parameters as views of ONE flat tensor (and one flat gradient), so gradient
  clipping and the optimizer are single tensor ops;
- the optimizer (`make_optimizer`, by default FlatAdam at the training section's `lr`),
  its settings read from the training keys at every update (`set_optimizer_settings`);
- `apply_gradient`: backward, then in a learner mesh the all-reduce of
  [grad * n_local, n_local] (every rank applies the same global-mean gradient, so
  parameters stay bit-identical), `grad_clip`, the optimizer step;
- `set_hyperparams`: live training keys (ftrl.config.live) changed between updates;
- weights as a versioned flat float32 vector (`get_weights() -> (version, flat)`; the
  version goes up by one per update), the state on the wire (msgpack + numpy only:
  checkpoints, the mesh's broadcast of a joiner's state), snapshots to undo an update a
  mesh did not complete, and a digest for bit-identity checks.

`split_update` says how the learner group shares one update between its members (by
default: about equal env steps each, nothing else); an algorithm whose ranks must run
the same number of collectives per update says so there (PPO: its SGD steps per epoch).

Usable in-process (the driver's own learner, `num_learners=0`) or inside a learner
actor (ftrl/rl/learning/learner_actor.py), which sets `allreduce`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ftrl.config import AlgorithmConfig
from ftrl.config.keys import mesh_values
from ftrl.config.registry import config_from_dict
from ftrl.rl.learning.flat_adam import FlatAdam
from ftrl.rl.learning.shards import split_fragments
from ftrl.rl.models import factory
from ftrl.rl.rng_state import (
    bitgen_state_from_wire,
    bitgen_state_to_wire,
    torch_rng_from_wire,
    torch_rng_to_wire,
)
from ftrl.rl.sample_batch import BYTES_KEY
from ftrl.rl.spaces import SpaceSpec

Fragments = Sequence[dict[str, np.ndarray]]


def scheduled(value: float, schedule: list | None, env_steps: int) -> float:
    """Piecewise-linear schedule [[env_step, value], ...]; `value` when there is none.
    Before the first point its value holds; after the last point its value holds."""
    if not schedule:
        return float(value)
    points = [(float(s), float(v)) for s, v in schedule]
    if env_steps <= points[0][0]:
        return points[0][1]
    for (s0, v0), (s1, v1) in itertools.pairwise(points):
        if env_steps <= s1:
            if s1 == s0:
                return v1
            return v0 + (v1 - v0) * (env_steps - s0) / (s1 - s0)
    return points[-1][1]


class Learner:
    """Owns the model and optimizer; subclasses turn sample fragments into gradient steps."""

    def __init__(self, config: dict | AlgorithmConfig, space_spec: dict | SpaceSpec, seed: int | None = None,
                 set_torch_threads: bool = False, device: torch.device | str = "cpu"):
        if set_torch_threads:
            torch.set_num_threads(1)
        self.device = torch.device(device)
        #: sums a tensor over the learner mesh in place (None: a learner of its own)
        self.allreduce: Callable[[torch.Tensor], Any] | None = None
        self.config = config_from_dict(config)
        self.hp = self.config.training_cfg
        self.spec = space_spec if isinstance(space_spec, SpaceSpec) else SpaceSpec.from_dict(space_spec)
        seed = self.config.debugging_cfg.seed if seed is None else seed
        if seed is not None:
            torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.model = self.build_model().to(self.device)
        self._flat, self._flat_grad = _flatten_parameters([p for p in self.model.parameters() if p.requires_grad])
        self.optimizer = self.make_optimizer(self._flat)
        self._init_optimizer_state()
        self.version = 0
        self.num_updates = 0

    # ------------------------------------------------------------------ what subclasses choose

    def build_model(self) -> torch.nn.Module:
        """The network (its parameters are made views of one flat tensor after this): the
        model `ftrl.rl.models.factory.build_model` picks for the spaces and `model` keys
        (ConfigError for one that cannot work on them)."""
        return factory.build_model(self.spec, self.config.model_config)

    def make_optimizer(self, flat: torch.nn.Parameter) -> Any:
        """The optimizer of the flat parameter (Adam at the training section's lr): an
        object with torch.optim's `step`, `state`, `param_groups`, `defaults`,
        `state_dict`/`load_state_dict`, `state_keys` (its per-parameter buffers) and
        `new_buffer(key)`. Its settings are `optimizer_settings()`, set again before every
        update."""
        return FlatAdam(flat, lr=self.hp.lr, **self.optimizer_settings())

    def optimizer_settings(self) -> dict[str, float]:
        """The optimizer's settings besides lr, from the training keys (IMPALA's RMSProp:
        alpha, eps, momentum): read at every update, so those keys are live."""
        return {}

    def update(self, fragments: Fragments, env_steps_sampled: int = 0, **options: Any) -> dict[str, Any]:
        """Learn on the fragments (this rank's shard in a mesh); the version goes up by one.
        `options` are what `split_update` gave every member."""
        raise NotImplementedError

    @classmethod
    def split_update(cls, config: AlgorithmConfig, fragments: Fragments,
                     num_members: int) -> tuple[list[list[dict[str, np.ndarray]]], dict[str, Any]]:
        """How a learner group shares one update: a shard per member (about equal env
        steps) and the `update` options every member gets (the same on every rank)."""
        return split_fragments(list(fragments), num_members), {}

    @classmethod
    def mesh_config_hash(cls, config: dict | AlgorithmConfig, space_spec: dict) -> str:
        """What members of one mesh must share, hashed (the learner group computes it once
        and gives it to every member; the rendezvous refuses a joiner with another): the
        spaces, and the keys whose fields say the learners must agree on them (`mesh`,
        ftrl/config/keys.py: every training key unless it opts out, the algorithm, the
        model, num_gpus_per_learner: one backend per mesh)."""
        data = {"config": mesh_values(config_from_dict(config)), "space_spec": space_spec}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:32]

    #: update results that are the same on every rank of a mesh (taken from one)
    rank_invariant_stats: tuple[str, ...] = ("grad_norm", "lr", "num_sgd_steps")

    @classmethod
    def merge_stats(cls, results: list[dict[str, Any]]) -> dict[str, Any]:
        """One update's results over the members: sample counts summed, the slowest
        member's time, rank-invariant values from one, other numbers sample-weighted."""
        total = sum(int(r.get("num_samples", 0)) for r in results)
        out: dict[str, Any] = {"num_samples": total}
        first = results[0] if results else {}
        skip = {"num_samples", "learn_time_s", "weights_version", "rank", *cls.rank_invariant_stats}
        keys = [k for k, v in first.items() if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool)]
        for key in keys:
            vals = [(float(r[key]), int(r.get("num_samples", 0))) for r in results if key in r]
            weight = sum(n for _, n in vals)
            out[key] = sum(v * n for v, n in vals) / weight if weight else math.nan
        for key in cls.rank_invariant_stats:
            if key in first:
                out[key] = first[key]
        out["learn_time_s"] = max((float(r.get("learn_time_s", 0.0)) for r in results), default=0.0)
        return out

    # ------------------------------------------------------------------ one gradient step

    def new_reduce_buffer(self) -> torch.Tensor | None:
        """A buffer for one update's all-reduces (None outside a mesh). One per update:
        an abandoned collective can only ever write into its own."""
        if self.allreduce is None:
            return None
        return torch.zeros(self._flat_grad.numel() + 1, device=self.device)

    def apply_gradient(self, loss: torch.Tensor | None, n_local: int,
                       reduce_buf: torch.Tensor | None = None, summed: bool = False) -> float:
        """Backward on `loss`, the mean over this rank's `n_local` samples, (mesh: sum
        [grad * n, n] over ranks and take the global mean), with `summed` times the
        number of samples (the gradient of the loss summed over the steps), clip to
        `grad_clip`, step; returns the gradient norm before clipping. `loss` None: this
        rank has no samples in this step (it contributes zeros). Every rank computes the
        same norm from the same gradient."""
        self._flat_grad.zero_()
        if loss is not None:
            loss.backward()
        samples = float(n_local)
        if self.allreduce is not None and reduce_buf is not None:
            body = reduce_buf[:-1]
            torch.mul(self._flat_grad, float(n_local), out=body)
            reduce_buf[-1] = float(n_local)
            self.allreduce(reduce_buf)
            samples = float(reduce_buf[-1])
            if samples <= 0:
                return 0.0  # nobody had samples in this step
            torch.div(body, samples, out=self._flat_grad)
        if summed:
            self._flat_grad.mul_(samples)
        grad_norm = float(torch.linalg.vector_norm(self._flat_grad))
        clip = self.hp.grad_clip
        if clip is not None and grad_norm > clip:
            self._flat_grad.mul_(clip / (grad_norm + 1e-6))
        self.optimizer.step()
        return grad_norm

    def set_optimizer_settings(self, lr: float) -> None:
        """The optimizer's learning rate (schedules set it per update) and its other
        settings (`optimizer_settings`) from the training keys, before an update."""
        for group in self.optimizer.param_groups:
            group.update(self.optimizer_settings(), lr=lr)

    def set_hyperparams(self, values: dict[str, Any]) -> None:
        """Training keys that take effect from the next update on: the live keys of
        `ftrl.config.live`, checked by the driver (an exploit of population-based training)."""
        fields = getattr(self.hp, "__dataclass_fields__", {})
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"no training keys {unknown} in {type(self.hp).__name__}")
        for key, value in values.items():
            setattr(self.hp, key, value)  # lr too: every update sets the optimizer's from it

    # ------------------------------------------------------------------ mesh state

    def _init_optimizer_state(self) -> None:
        """Create the optimizer's state now (step 0, the buffers as a fresh optimizer's), so
        every rank has the same tensors to broadcast before its first step."""
        state = self.optimizer.state[self._flat]
        if not state:
            step_device = self.device if self.optimizer.defaults.get("fused") else torch.device("cpu")
            state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
            for key in self.optimizer.state_keys:
                state[key] = self.optimizer.new_buffer(key)

    def state_tensors(self) -> list[torch.Tensor]:
        """The trained state as tensors, for a broadcast over the mesh: parameters and the
        optimizer's buffers (Adam's moments; the counters travel as `counters_tensor`)."""
        state = self.optimizer.state[self._flat]
        return [self._flat.data, *(state[key] for key in self.optimizer.state_keys)]

    def counters_tensor(self) -> torch.Tensor:
        step = float(self.optimizer.state[self._flat]["step"])
        return torch.tensor([step, float(self.version), float(self.num_updates)], dtype=torch.float64,
                            device=self.device)

    def set_counters(self, counters: torch.Tensor) -> None:
        step, version, num_updates = (float(x) for x in counters.cpu())
        self.optimizer.state[self._flat]["step"].fill_(step)
        self.version = int(version)
        self.num_updates = int(num_updates)

    def snapshot(self) -> dict[str, Any]:
        """A copy of the trained state, to undo an update the mesh did not complete."""
        return {"tensors": [t.detach().clone() for t in self.state_tensors()],
                "counters": self.counters_tensor(),
                "rng": self.rng.bit_generator.state}

    def restore(self, snap: dict[str, Any]) -> None:
        with torch.no_grad():
            for own, saved in zip(self.state_tensors(), snap["tensors"], strict=True):
                own.copy_(saved)
        self.set_counters(snap["counters"])
        self.rng.bit_generator.state = snap["rng"]

    def digest(self) -> str:
        """sha256 of parameters, optimizer moments and counters (bit-identity checks)."""
        h = hashlib.sha256()
        for t in (*self.state_tensors(), self.counters_tensor()):
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    # ------------------------------------------------------------------ weights and state

    def get_weights(self) -> tuple[int, np.ndarray]:
        """(version, flat float32 parameters)."""
        return self.version, self.model.get_flat()

    def set_weights(self, version: int, weights: np.ndarray) -> None:
        self.model.set_flat(weights)
        self.version = int(version)

    def reset_optimizer(self) -> None:
        """Fresh Adam state (zero moments, step 0), e.g. under weights from elsewhere."""
        self.optimizer.state.clear()
        self._init_optimizer_state()

    def get_state(self) -> dict[str, Any]:
        """Model, optimizer, version and RNG states as msgpack + numpy (for checkpoints)."""
        return {
            "model": {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()},
            "optimizer": _optimizer_state_to_wire(self.optimizer.state_dict()),
            "version": self.version,
            "num_updates": self.num_updates,
            "torch_rng": torch_rng_to_wire(),
            "np_rng": bitgen_state_to_wire(self.rng.bit_generator.state),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what `get_state` returned (raises ValueError on a shape mismatch)."""
        own = self.model.state_dict()
        model_state = state["model"]
        if set(model_state) != set(own):
            raise ValueError(f"model parameters differ: {sorted(model_state)} vs {sorted(own)}")
        for key, value in model_state.items():
            if tuple(np.shape(value)) != tuple(own[key].shape):
                raise ValueError(f"model parameter {key} has shape {np.shape(value)}, expected {tuple(own[key].shape)}")
        self.model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in model_state.items()})
        self.optimizer.load_state_dict(_optimizer_state_from_wire(state["optimizer"]))
        self.version = int(state["version"])
        self.num_updates = int(state.get("num_updates", 0))
        if "torch_rng" in state:
            torch_rng_from_wire(state["torch_rng"])
        if "np_rng" in state:
            self.rng.bit_generator.state = bitgen_state_from_wire(state["np_rng"])
        self._init_optimizer_state()  # a state saved before the first step has none yet

    def ping(self) -> dict[str, Any]:
        return {"ok": True, "weights_version": self.version}


def _flatten_parameters(params: list[torch.nn.Parameter]) -> tuple[torch.nn.Parameter, torch.Tensor]:
    """Make `params` (and their grads) views of one flat parameter (and one flat grad),
    so gradient clipping and Adam are single tensor ops instead of one per layer.
    Zero the grad with `flat_grad.zero_()`: setting grads to None would cut the views."""
    total = sum(p.numel() for p in params)
    flat = torch.zeros(total, device=params[0].device)  # where the model is (a GPU learner's too)
    flat_grad = torch.zeros(total, device=params[0].device)
    offset = 0
    for p in params:
        n = p.numel()
        flat[offset : offset + n].copy_(p.data.reshape(-1))
        p.data = flat[offset : offset + n].view_as(p)
        p.grad = flat_grad[offset : offset + n].view_as(p)
        offset += n
    flat_param = torch.nn.Parameter(flat)
    flat_param.grad = flat_grad
    return flat_param, flat_grad


def _optimizer_state_to_wire(state: dict[str, Any]) -> dict[str, Any]:
    """Optimizer state_dict with tensors as arrays and its int keys as strings."""
    return {
        "state": {str(k): _to_numpy(v) for k, v in state["state"].items()},
        "param_groups": _to_numpy(state["param_groups"]),
    }


def _optimizer_state_from_wire(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": {int(k): _to_torch(v) for k, v in state["state"].items()},
        "param_groups": _to_torch(state["param_groups"]),
    }


def _to_numpy(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy().copy()
    if isinstance(obj, dict):
        return {k: _to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_numpy(v) for v in obj]
    return obj


def _to_torch(obj: Any, key: Any = None) -> Any:
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.array(obj, copy=True))
    if isinstance(obj, dict):
        return {k: _to_torch(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [_to_torch(v) for v in obj]
        return tuple(items) if key == "betas" else items
    return obj


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on the learner's device: on a GPU through pinned memory with a
    non-blocking copy (the copy overlaps the work queued before it)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def join_bytes(batch: dict[str, torch.Tensor], spec: SpaceSpec) -> dict[str, torch.Tensor]:
    """The batch with a structured observation's uint8 columns (BYTES_KEY, on the device
    already) put back among its float ones as float: full rows under "obs", as the model
    reads them. A batch without them is returned as it is."""
    if BYTES_KEY not in batch:
        return batch
    out = dict(batch)
    floats, raw = out.pop("obs"), out.pop(BYTES_KEY)
    byte_cols = torch.as_tensor(spec.byte_columns, device=floats.device)
    keep = torch.ones(spec.obs_dim, dtype=torch.bool, device=floats.device)
    keep[byte_cols] = False
    full = floats.new_empty((*floats.shape[:-1], spec.obs_dim))
    full[..., keep] = floats
    full[..., byte_cols] = raw.to(floats.dtype)
    out["obs"] = full
    return out
