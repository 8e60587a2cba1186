"""PPO learner: GAE, clipped surrogate, (optionally clipped) value loss, entropy bonus,
minibatch epochs, gradient clipping. Torch on CPU.

Usable in-process (the Algorithm's own learner) or as an actor
("ftrl.rl.learning.learner:PPOLearner", kwargs {"config": config.to_dict(), "space_spec": ...}):
every argument and result is msgpack + numpy. Weights travel as a versioned flat
float32 vector: `get_weights() -> (version, flat)`; the version goes up by one per
`update()`.

Data-parallel (ftrl/rl/learning/learner_actor.py): with `allreduce` set, every SGD step sums
[grad * n_local, n_local] over the mesh, so each rank applies the same global-mean
gradient and the same optimizer step: parameters stay bit-identical. The driver
passes `sgd_steps_per_epoch` so every rank runs the same number of collectives,
whatever the size of its shard (an empty shard contributes zeros).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ftrl.config import AlgorithmConfig
from ftrl.rl.learning.flat_adam import FlatAdam
from ftrl.rl.models.actor_critic import ActorCritic
from ftrl.rl.sample_batch import check_fragment
from ftrl.rl.spaces import SpaceSpec
from ftrl.util.rng_state import (
    bitgen_state_from_wire,
    bitgen_state_to_wire,
    torch_rng_from_wire,
    torch_rng_to_wire,
)


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


def compute_gae(fragment: dict[str, np.ndarray], gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and value targets [T, E] for one time-major fragment.

    At step t the next state's value is 0 if terminated, V(final obs) (`trunc_values`)
    if truncated, else values[t+1] (or `last_values` after the last row). Advantages do
    not flow across an episode boundary.
    """
    rewards = fragment["rewards"].astype(np.float32)
    values = fragment["values"].astype(np.float32)
    term = fragment["terminateds"]
    trunc = fragment["truncateds"]
    tvals = fragment["trunc_values"].astype(np.float32)
    t_len = rewards.shape[0]
    next_values = np.empty_like(values)
    next_values[:-1] = values[1:]
    next_values[-1] = fragment["last_values"]
    next_values = np.where(term, 0.0, np.where(trunc, tvals, next_values)).astype(np.float32)
    deltas = rewards + gamma * next_values - values
    carry = (gamma * lam) * (~(term | trunc)).astype(np.float32)
    adv = np.empty_like(values)
    last = np.zeros(values.shape[1], np.float32)
    for t in range(t_len - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        adv[t] = last
    return adv, adv + values


class PPOLearner:
    """Owns the model and optimizer; turns sample fragments into gradient steps."""

    def __init__(self, config: dict | AlgorithmConfig, space_spec: dict | SpaceSpec, seed: int | None = None,
                 set_torch_threads: bool = False, device: torch.device | str = "cpu"):
        from ftrl.config.registry import config_from_dict

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
        self.model = ActorCritic(self.spec, self.config.model_config).to(self.device)
        self._flat, self._flat_grad = _flatten_parameters([p for p in self.model.parameters() if p.requires_grad])
        self.optimizer = FlatAdam(self._flat, lr=self.hp.lr, eps=self.hp.adam_epsilon)
        self._init_optimizer_state()
        self.version = 0
        self.num_updates = 0

    # ------------------------------------------------------------------ learning

    def _train_batch(self, fragments: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        gamma = self.hp.gamma
        lam = self.hp.lambda_ if self.hp.use_gae else 1.0
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "actions", "logp", "values", "adv", "returns")}
        for frag in fragments:
            check_fragment(frag)
            adv, ret = compute_gae(frag, gamma, lam)
            valid = frag["valid"].reshape(-1)
            t, e = frag["rewards"].shape
            parts["obs"].append(frag["obs"].reshape(t * e, -1)[valid])
            parts["actions"].append(frag["actions"].reshape((t * e, *frag["actions"].shape[2:]))[valid])
            parts["logp"].append(frag["logp"].reshape(-1)[valid])
            parts["values"].append(frag["values"].reshape(-1)[valid])
            parts["adv"].append(adv.reshape(-1)[valid])
            parts["returns"].append(ret.reshape(-1)[valid])
        out = {}
        for key, arrays in parts.items():
            arr = np.concatenate(arrays, axis=0)
            out[key] = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.int64 if key == "actions" and self.spec.act_kind == "discrete" else np.float32)).to(self.device)
        return out

    def _empty_batch(self) -> dict[str, torch.Tensor]:
        obs = torch.zeros((0, self.spec.obs_dim), device=self.device)
        if self.spec.act_kind == "discrete":
            actions = torch.zeros(0, dtype=torch.int64, device=self.device)
        else:
            actions = torch.zeros((0, self.spec.act_dim), device=self.device)
        z = torch.zeros(0, device=self.device)
        return {"obs": obs, "actions": actions, "logp": z, "values": z, "adv": z, "returns": z}

    def update(self, fragments: Sequence[dict[str, Any]], env_steps_sampled: int = 0,
               sgd_steps_per_epoch: int | None = None) -> dict[str, Any]:
        """Run `num_epochs` of minibatch SGD on the fragments; return learner metrics.

        `env_steps_sampled` (total so far) drives the lr / clip schedules. In a mesh,
        `sgd_steps_per_epoch` (the same on every rank) splits the local shard.
        """
        if self.allreduce is not None:
            return self._update_data_parallel(fragments, env_steps_sampled, sgd_steps_per_epoch or 1)
        start = time.perf_counter()
        hp = self.hp
        batch = self._train_batch(fragments)
        n = int(batch["obs"].shape[0])
        if n == 0:
            return {"num_samples": 0, "weights_version": self.version}
        lr = scheduled(hp.lr, hp.lr_schedule, env_steps_sampled)
        clip = scheduled(hp.clip_param, hp.clip_param_schedule, env_steps_sampled)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        mb = min(hp.minibatch_size, n)
        stats = {"policy_loss": 0.0, "vf_loss": 0.0, "entropy": 0.0, "kl": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
        steps = 0
        self.model.train()
        for _ in range(hp.num_epochs):
            if mb >= n:  # one full-batch step per epoch: order does not matter
                step_stats = self._sgd_step(batch, clip)
                for k, v in step_stats.items():
                    stats[k] += v
                steps += 1
                continue
            perm = torch.from_numpy(self.rng.permutation(n))
            for lo in range(0, n, mb):
                idx = perm[lo : lo + mb]
                if len(idx) < max(2, mb // 2) and lo > 0:
                    continue  # a tiny remainder would give a noisy step
                step_stats = self._sgd_step({k: v[idx] for k, v in batch.items()}, clip)
                for k, v in step_stats.items():
                    stats[k] += v
                steps += 1
        self.model.eval()
        self.version += 1
        self.num_updates += 1
        out: dict[str, Any] = {k: v / max(1, steps) for k, v in stats.items()}
        with torch.no_grad():
            var = float(batch["returns"].var()) if n > 1 else 0.0
            resid = float((batch["returns"] - batch["values"]).var()) if n > 1 else 0.0
        out.update(
            {
                "lr": lr,
                "clip_param": clip,
                "num_samples": n,
                "num_sgd_steps": steps,
                "vf_explained_var": 1.0 - resid / var if var > 0 else math.nan,
                "weights_version": self.version,
                "learn_time_s": time.perf_counter() - start,
            }
        )
        return out

    def _update_data_parallel(self, fragments: Sequence[dict[str, Any]], env_steps_sampled: int,
                              steps_per_epoch: int) -> dict[str, Any]:
        """`update` as one rank of a mesh: the same number of all-reduced steps on every rank."""
        start = time.perf_counter()
        hp = self.hp
        batch = self._train_batch(fragments) if fragments else self._empty_batch()
        n = int(batch["obs"].shape[0])
        lr = scheduled(hp.lr, hp.lr_schedule, env_steps_sampled)
        clip = scheduled(hp.clip_param, hp.clip_param_schedule, env_steps_sampled)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # one buffer per update: an abandoned collective can only ever write into its own
        reduce_buf = torch.zeros(self._flat_grad.numel() + 1, device=self.device)
        stats = {"policy_loss": 0.0, "vf_loss": 0.0, "entropy": 0.0, "kl": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
        local_steps = 0
        self.model.train()
        for _ in range(hp.num_epochs):
            perm = self.rng.permutation(n)
            for idx in np.array_split(perm, steps_per_epoch):
                mb = {k: v[torch.from_numpy(idx).to(self.device)] for k, v in batch.items()}
                step_stats = self._sgd_step(mb, clip, reduce_buf)
                if len(idx):
                    local_steps += 1
                    for k, v in step_stats.items():
                        stats[k] += v
        self.model.eval()
        self.version += 1
        self.num_updates += 1
        out: dict[str, Any] = {k: v / max(1, local_steps) for k, v in stats.items()}
        out.update({
            "lr": lr,
            "clip_param": clip,
            "num_samples": n,
            "num_sgd_steps": steps_per_epoch * hp.num_epochs,
            "weights_version": self.version,
            "learn_time_s": time.perf_counter() - start,
        })
        return out

    def _sgd_step(self, mb: dict[str, torch.Tensor], clip: float,
                  reduce_buf: torch.Tensor | None = None) -> dict[str, float]:
        hp = self.hp
        n_local = int(mb["obs"].shape[0])
        if n_local == 0:  # an empty share of this step: contribute nothing, step with the rest
            return self._apply_gradient(None, 0, clip, reduce_buf) | {
                "policy_loss": 0.0, "vf_loss": 0.0, "entropy": 0.0, "kl": 0.0, "clip_frac": 0.0}
        logp, entropy, values = self.model.evaluate(mb["obs"], mb["actions"])
        adv = mb["adv"]
        if hp.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        log_ratio = logp - mb["logp"]
        ratio = log_ratio.exp()
        surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
        policy_loss = -surrogate.mean()
        vf_loss = (values - mb["returns"]) ** 2
        if hp.vf_clip_param is not None:
            vf_loss = vf_loss.clamp(max=hp.vf_clip_param)
        vf_loss = vf_loss.mean()
        ent = entropy.mean()
        loss = policy_loss + hp.vf_loss_coeff * vf_loss - hp.entropy_coeff * ent
        applied = self._apply_gradient(loss, n_local, clip, reduce_buf)
        with torch.no_grad():
            kl = float(((ratio - 1.0) - log_ratio).mean())
            clip_frac = float(((ratio - 1.0).abs() > clip).float().mean())
        return {
            "policy_loss": float(policy_loss.detach()),
            "vf_loss": float(vf_loss.detach()),
            "entropy": float(ent.detach()),
            "kl": kl,
            "clip_frac": clip_frac,
            **applied,
        }

    def _apply_gradient(self, loss: torch.Tensor | None, n_local: int, clip: float,
                        reduce_buf: torch.Tensor | None) -> dict[str, float]:
        """Backward, (mesh: sum [grad * n, n] over ranks and take the global mean), clip,
        step. Every rank computes the same norm from the same gradient."""
        hp = self.hp
        self._flat_grad.zero_()
        if loss is not None:
            loss.backward()
        if self.allreduce is not None and reduce_buf is not None:
            body = reduce_buf[:-1]
            torch.mul(self._flat_grad, float(n_local), out=body)
            reduce_buf[-1] = float(n_local)
            self.allreduce(reduce_buf)
            total = float(reduce_buf[-1])
            if total <= 0:
                return {"grad_norm": 0.0}  # nobody had samples in this step
            torch.div(body, total, out=self._flat_grad)
        grad_norm = float(torch.linalg.vector_norm(self._flat_grad))
        if hp.grad_clip is not None and grad_norm > hp.grad_clip:
            self._flat_grad.mul_(hp.grad_clip / (grad_norm + 1e-6))
        self.optimizer.step()
        return {"grad_norm": grad_norm}

    # ------------------------------------------------------------------ weights and state

    # ------------------------------------------------------------------ mesh state

    def _init_optimizer_state(self) -> None:
        """Create Adam's state now (zeros, step 0: the same as a fresh optimizer), so
        every rank has the same tensors to broadcast before its first step."""
        state = self.optimizer.state[self._flat]
        if not state:
            step_device = self.device if self.optimizer.defaults.get("fused") else torch.device("cpu")
            state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
            state["exp_avg"] = torch.zeros_like(self._flat, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(self._flat, memory_format=torch.preserve_format)

    def state_tensors(self) -> list[torch.Tensor]:
        """The trained state as tensors, for a broadcast over the mesh: parameters and
        Adam's moments (the counters travel as `counters_tensor`)."""
        state = self.optimizer.state[self._flat]
        return [self._flat.data, state["exp_avg"], state["exp_avg_sq"]]

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
        import hashlib

        h = hashlib.sha256()
        for t in (*self.state_tensors(), self.counters_tensor()):
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

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

