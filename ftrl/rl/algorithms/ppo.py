"""PPO (Schulman et al. 2017): clipped surrogate, GAE, minibatch SGD epochs. All of it,
top to bottom:

    config        PPOConfig / PPOTrainingConfig (ftrl/config/ppo.py: torch-free, so the
                  SDK, the client and the coordinator read PPO configs without torch)
    compute_gae   advantages and value targets of one fragment
    train_batch   fragments -> one flat batch of tensors
    ppo_loss      the loss of one minibatch (a pure function of model and minibatch)
    minibatches   the index plan of one epoch
    PPOLearner    the epoch/minibatch loop on the generic Learner (ftrl.rl.learning)
    PPO           one training iteration: sample -> learn -> sync weights

The learner is in the driver (`num_learners=0`) or on every member of the elastic
learner group (`num_learners > 0`); the loop is the same: a mesh rank is told how many
SGD steps an epoch has (`split_update`), so every rank runs the same number of
all-reduced steps whatever the size of its shard (an empty one contributes zeros).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ftrl.config.ppo import PPOConfig, PPOTrainingConfig
from ftrl.rl.algorithms.ppo_sequences import evaluate_masked, num_sequences, select, sequence_batch
from ftrl.rl.driver.algorithm import Algorithm
from ftrl.rl.learning.learner import Learner, join_bytes, scheduled, to_device
from ftrl.rl.learning.shards import split_fragments
from ftrl.rl.sample_batch import BYTES_KEY, check_fragment
from ftrl.rl.spaces import SpaceSpec

__all__ = ["PPO", "PPOConfig", "PPOLearner", "PPOTrainingConfig", "compute_gae", "minibatches", "ppo_loss",
           "train_batch"]

#: the per-step statistics averaged over an update
STEP_STATS = ("policy_loss", "vf_loss", "entropy", "kl", "clip_frac", "grad_norm")


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


def train_batch(fragments: Sequence[dict[str, Any]], hp: PPOTrainingConfig, spec: SpaceSpec,
                device: torch.device) -> dict[str, torch.Tensor]:
    """The valid steps of all fragments as flat tensors: obs, actions, logp, values,
    adv (GAE), returns (value targets). Empty tensors when there are none."""
    if not fragments:
        return _empty_batch(spec, device)
    lam = hp.lambda_ if hp.use_gae else 1.0
    obs_keys = ("obs", BYTES_KEY) if BYTES_KEY in fragments[0] else ("obs",)  # images of a Dict: bytes apart
    parts: dict[str, list[np.ndarray]] = {k: [] for k in (*obs_keys, "actions", "logp", "values", "adv", "returns")}
    for frag in fragments:
        check_fragment(frag)
        adv, ret = compute_gae(frag, hp.gamma, lam)
        valid = frag["valid"].reshape(-1)
        t, e = frag["rewards"].shape
        for key in obs_keys:
            parts[key].append(frag[key].reshape(t * e, -1)[valid])
        parts["actions"].append(frag["actions"].reshape((t * e, *frag["actions"].shape[2:]))[valid])
        parts["logp"].append(frag["logp"].reshape(-1)[valid])
        parts["values"].append(frag["values"].reshape(-1)[valid])
        parts["adv"].append(adv.reshape(-1)[valid])
        parts["returns"].append(ret.reshape(-1)[valid])
    dtypes = {"actions": np.int64 if spec.all_discrete else np.float32}
    return join_bytes({key: to_device(np.concatenate(arrays, axis=0).astype(_batch_dtype(key, arrays, dtypes),
                                                                          copy=False), device)
                       for key, arrays in parts.items()}, spec)


def _batch_dtype(key: str, arrays: list[np.ndarray], dtypes: dict[str, type]) -> Any:
    """A train batch column's dtype: uint8 observations stay bytes (on the device the
    model, or `join_bytes`, makes them float), actions int64 or float32, the rest float32."""
    if key in ("obs", BYTES_KEY) and arrays and arrays[0].dtype == np.uint8:
        return np.uint8
    return dtypes.get(key, np.float32)


def _empty_batch(spec: SpaceSpec, device: torch.device) -> dict[str, torch.Tensor]:
    """A batch of no steps (a mesh rank whose shard is empty still takes every step)."""
    obs = torch.zeros((0, spec.obs_dim), device=device)
    dtype = torch.int64 if spec.all_discrete else torch.float32
    actions = torch.zeros((0, *spec.action_row_shape), dtype=dtype, device=device)
    z = torch.zeros(0, device=device)
    return {"obs": obs, "actions": actions, "logp": z, "values": z, "adv": z, "returns": z}


def ppo_loss(model: torch.nn.Module, mb: dict[str, torch.Tensor], clip: float,
             hp: PPOTrainingConfig, kl_coeff: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate + vf_loss_coeff * (optionally clipped) value loss - entropy_coeff
    * entropy (+ kl_coeff * KL with `use_kl_loss`), on one minibatch (flat steps, or
    sequences for a recurrent model: only their real, valid steps count); returns the
    loss and its statistics. The KL of the sampling policy to the current one is the
    unbiased estimate from the sampled actions, mean((ratio - 1) - log ratio) (the stored
    log-probs are of the taken actions only)."""
    if getattr(model, "recurrent", False):
        logp, entropy, values, mb = evaluate_masked(model, mb)
    else:
        logp, entropy, values = model.evaluate(mb["obs"], mb["actions"])
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
    kl_estimate = ((ratio - 1.0) - log_ratio).mean()
    loss = policy_loss + hp.vf_loss_coeff * vf_loss - hp.entropy_coeff * ent
    if hp.use_kl_loss:
        loss = loss + kl_coeff * kl_estimate
    with torch.no_grad():
        kl = float(kl_estimate)
        clip_frac = float(((ratio - 1.0).abs() > clip).float().mean())
    return loss, {"policy_loss": float(policy_loss.detach()), "vf_loss": float(vf_loss.detach()),
                  "entropy": float(ent.detach()), "kl": kl, "clip_frac": clip_frac}


def minibatches(n: int, minibatch_size: int, steps: int | None, rng: np.random.Generator) -> list[np.ndarray | None]:
    """The index arrays of one epoch's SGD steps over a batch of `n` steps.

    `steps` None (a learner of its own): minibatches of `minibatch_size` from a fresh
    permutation, a tiny remainder (< half a minibatch) dropped; the whole batch as one
    step (None: no permutation drawn) when it fits one minibatch. `steps` given (a mesh
    rank): exactly that many near-equal parts of a permutation of this rank's shard,
    some possibly empty, so every rank runs the same number of all-reduces."""
    if steps is not None:
        return np.array_split(rng.permutation(n), steps)
    if minibatch_size >= n:
        return [None]
    perm = rng.permutation(n)
    chunks = [perm[lo : lo + minibatch_size] for lo in range(0, n, minibatch_size)]
    return [c for i, c in enumerate(chunks) if i == 0 or len(c) >= max(2, minibatch_size // 2)]


class PPOLearner(Learner):
    """PPO's update on the generic Learner: GAE, then `num_epochs` of minibatch SGD."""

    rank_invariant_stats = ("grad_norm", "lr", "clip_param", "num_sgd_steps", "kl_coeff")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kl_coeff = float(self.hp.kl_coeff)

    def optimizer_settings(self) -> dict[str, float]:
        return {"eps": self.hp.adam_epsilon}

    @classmethod
    def split_update(cls, config: PPOConfig, fragments: Sequence[dict[str, np.ndarray]],
                     num_members: int) -> tuple[list[list[dict[str, np.ndarray]]], dict[str, Any]]:
        """A shard per member, and the SGD steps per epoch of the WHOLE batch (the
        steps of one learner), which every member takes on its shard."""
        n_total = int(sum(int(f["valid"].sum()) for f in fragments))
        steps = max(1, n_total // max(1, config.training_cfg.minibatch_size))
        return split_fragments(list(fragments), num_members), {"sgd_steps_per_epoch": steps}

    def update(self, fragments: Sequence[dict[str, Any]], env_steps_sampled: int = 0,
               sgd_steps_per_epoch: int | None = None) -> dict[str, Any]:
        """`num_epochs` of minibatch SGD on the fragments; returns learner metrics.
        `env_steps_sampled` (total so far) drives the lr and clip schedules; in a mesh,
        `sgd_steps_per_epoch` (the same on every rank) splits this rank's shard."""
        start = time.perf_counter()
        hp = self.hp
        in_mesh = self.allreduce is not None
        steps_per_epoch = (sgd_steps_per_epoch or 1) if in_mesh else None
        recurrent = getattr(self.model, "recurrent", False)
        batch = self._sequences(fragments) if recurrent else train_batch(fragments, hp, self.spec, self.device)
        # the minibatches are of steps, or of whole sequences for a recurrent model
        n = num_sequences(batch) if recurrent else int(batch["obs"].shape[0])
        seq_len = self.config.model_config.max_seq_len
        minibatch_size = max(1, hp.minibatch_size // seq_len) if recurrent else hp.minibatch_size
        if n == 0 and not in_mesh:
            return {"num_samples": 0, "weights_version": self.version}
        lr = scheduled(hp.lr, hp.lr_schedule, env_steps_sampled)
        clip = scheduled(hp.clip_param, hp.clip_param_schedule, env_steps_sampled)
        self.set_optimizer_settings(lr)
        reduce_buf = self.new_reduce_buffer()
        totals = dict.fromkeys(STEP_STATS, 0.0)
        steps = local_steps = 0
        self.model.train()
        for _ in range(hp.num_epochs):
            for idx in minibatches(n, minibatch_size, steps_per_epoch, self.rng):
                index = None if idx is None else torch.from_numpy(idx).to(self.device)
                if recurrent:
                    mb = batch if index is None else select(batch, index)
                    n_local = int(mb["mask"].sum())
                else:
                    mb = batch if index is None else {k: v[index] for k, v in batch.items()}
                    n_local = int(mb["obs"].shape[0])
                steps += 1
                if n_local == 0:  # an empty share of this step: contribute nothing, step with the rest
                    self.apply_gradient(None, 0, reduce_buf)
                    continue
                loss, stats = ppo_loss(self.model, mb, clip, hp, self.kl_coeff)
                stats["grad_norm"] = self.apply_gradient(loss, n_local, reduce_buf)
                local_steps += 1
                for key, value in stats.items():
                    totals[key] += value
        self.model.eval()
        self.version += 1
        self.num_updates += 1
        out: dict[str, Any] = {k: v / max(1, local_steps) for k, v in totals.items()}
        if hp.use_kl_loss:
            out["kl_coeff"] = self._adapt_kl_coeff(totals["kl"], local_steps)
        if recurrent:  # the statistics of the real, valid steps
            batch = {key: batch[key][batch["mask"]] for key in ("returns", "values")}
            n = int(batch["returns"].shape[0])
        with torch.no_grad():
            var = float(batch["returns"].var()) if n > 1 else 0.0
            resid = float((batch["returns"] - batch["values"]).var()) if n > 1 else 0.0
        out.update({
            "lr": lr,
            "clip_param": clip,
            "num_samples": n,
            "num_sgd_steps": steps,
            "vf_explained_var": 1.0 - resid / var if var > 0 else math.nan,
            "weights_version": self.version,
            "learn_time_s": time.perf_counter() - start,
        })
        return out


    # ---- the KL coefficient (use_kl_loss): adapted after every update, RLlib's rule

    def _adapt_kl_coeff(self, kl_sum: float, local_steps: int) -> float:
        """kl_coeff * 1.5 when the update's mean KL (over every rank's SGD steps) was above
        2 * kl_target, * 0.5 when below half of it; the coefficient the next update uses."""
        totals = torch.tensor([kl_sum, float(local_steps)], dtype=torch.float64, device=self.device)
        if self.allreduce is not None:  # every rank adapts from the same mean
            self.allreduce(totals)
        kl = float(totals[0]) / max(1.0, float(totals[1]))
        if kl > 2.0 * self.hp.kl_target:
            self.kl_coeff *= 1.5
        elif kl < 0.5 * self.hp.kl_target:
            self.kl_coeff *= 0.5
        return self.kl_coeff

    def counters_tensor(self) -> torch.Tensor:
        """The counters, and with `use_kl_loss` the adapted coefficient (a mesh broadcasts it)."""
        counters = super().counters_tensor()
        if not self.hp.use_kl_loss:
            return counters
        return torch.cat([counters, torch.tensor([self.kl_coeff], dtype=torch.float64, device=self.device)])

    def set_counters(self, counters: torch.Tensor) -> None:
        super().set_counters(counters[:3])
        if counters.numel() > 3:
            self.kl_coeff = float(counters[3])

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "kl_coeff": self.kl_coeff}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.kl_coeff = float(state.get("kl_coeff", self.hp.kl_coeff))

    def _sequences(self, fragments: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The fragments as sequences of max_seq_len steps (ftrl.rl.algorithms.ppo_sequences)."""
        spec = self.spec
        return join_bytes(sequence_batch(fragments, self.hp, self.config.model_config.max_seq_len, compute_gae,
                                         self.device, spec.obs_dim, spec.action_row_shape, spec.action_dtype,
                                         int(self.model.initial_state(1).shape[1])), spec)


class PPO(Algorithm):
    """Proximal Policy Optimization on a learner in the driver or on the elastic learner
    group (`num_learners > 0`); `self.learner` has the same interface either way. Setup,
    episode and metrics bookkeeping, evaluation, checkpoints and running to a stop are
    the driver's (ftrl/rl/driver/)."""

    #: What each learner actor hosts when `num_learners > 0`.
    learner_class_path = "ftrl.rl.algorithms.ppo:PPOLearner"

    def setup_learner(self) -> PPOLearner:
        """The in-process learner (`num_learners=0`)."""
        return PPOLearner(self.config, self.spec)

    def training_iteration(self) -> dict[str, Any]:
        """Sample -> learn -> sync weights; returns the learner's metrics and timers."""
        # 1. sample: at least train_batch_size env steps (or what sample_timeout_s allowed)
        t0 = time.perf_counter()
        fragments = self.synchronous_parallel_sample(max_env_steps=self.config.training_cfg.train_batch_size)
        t1 = time.perf_counter()
        if not fragments:  # every runner failed or was late: nothing to learn on
            return {
                "learner": {"num_samples": 0, "weights_version": self.learner_version},
                "timers": {"sample_s": t1 - t0, "learn_s": 0.0, "sync_weights_s": 0.0},
            }
        # 2. learn: SGD epochs on the batch; the weights version goes up by one
        learn = self.learner.update(fragments, env_steps_sampled=self.env_steps_sampled)
        self.env_steps_trained += int(learn.get("num_samples", 0))
        t2 = time.perf_counter()
        # 3. sync weights: the new version (and the observation filter) to the runners
        self.sync_weights()
        t3 = time.perf_counter()
        return {"learner": learn, "timers": {"sample_s": t1 - t0, "learn_s": t2 - t1, "sync_weights_s": t3 - t2}}
