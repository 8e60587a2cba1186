"""IMPALA (Espeholt et al. 2018, arXiv 1802.01561): asynchronous actors, one learner,
V-trace off-policy correction. All of it, top to bottom:

    config          IMPALAConfig / IMPALATrainingConfig (ftrl/config/impala.py: torch-free)
    the loss terms  small pure functions IMPALA's and APPO's losses are sums of (as
                    TorchBeast's monobeast): `vtrace` (V-trace value targets and
                    policy-gradient advantages), `vtrace_targets` (V-trace on one batch),
                    `policy_gradient_term`, `value_term`, `entropy_term`
    impala_loss     policy gradient + value loss - entropy bonus of one batch
    time_major      fragments -> [T, B] tensors, and the bootstrap values V-trace needs
    IMPALALearner   one gradient step per batch on the generic Learner (Adam or RMSProp)
    IMPALA          the driver: runners sample without rounds, the learner learns in a
                    thread off a bounded queue (`AsyncLearner`,
                    ftrl/rl/driver/async_learner.py, the driver's access to its learner)

Data path. Runners sample fragments continuously, each stamped with the weights version
it was sampled with and the runner incarnation that sampled it; the driver harvests
what is done (`EnvRunnerGroup.harvest`), gives each runner the newest published weights
before its next fragment and fills train batches of `train_batch_size` env steps into a
queue of `learner_queue_size` batches. When the queue is full the runners wait. The
learner publishes its weights every `broadcast_interval` updates, without waiting for
anybody. A sample more than `max_policy_lag` updates behind the learner when its batch
is taken is dropped and counted. A fragment whose runner died never arrives: it is
counted lost, never half-used. An iteration is a reporting window
(`min_time_s_per_iteration`, at least one update), not a barrier.

`deterministic=True` replaces the thread by a pipeline of lag exactly 1 (as Cleanba):
update k learns on one fragment of every runner, in runner order, sampled with the
weights of update k-1 while update k-1 ran. The same seed gives the same run, bit for bit.

An exploit of population-based training (ftrl.rl.driver.exploit) swaps the learner's
state and hyperparameters with the learner thread paused, publishes the new weights,
and moves the weights version more than `max_policy_lag` past the old ones: whatever
the old weights sampled (in flight, being filled, queued) is dropped by the lag check.

The bootstrap values past a fragment's end and at time-limit cuts are the runner's
(V of the behaviour weights): fragments do not carry the next observation. Every other
value is the learner's own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ftrl.config.impala import IMPALAConfig, IMPALATrainingConfig
from ftrl.rl.driver.algorithm import Algorithm
from ftrl.rl.driver.async_learner import AsyncLearner, TrainBatch, lag_stats, within_lag
from ftrl.rl.driver.learner_access import DirectAccess, LearnerAccess
from ftrl.rl.learning.flat_adam import FlatAdam
from ftrl.rl.learning.flat_rmsprop import FlatRMSProp
from ftrl.rl.learning.learner import Learner, join_bytes, scheduled, to_device
from ftrl.rl.sample_batch import BYTES_KEY, PER_ENV_KEYS, RECURRENT_KEYS, check_fragment

__all__ = ["IMPALA", "IMPALAConfig", "IMPALALearner", "IMPALATrainingConfig", "entropy_term", "impala_loss",
           "policy_gradient_term", "time_major", "value_term", "vtrace", "vtrace_targets"]

log = logging.getLogger(__name__)

#: a request to a runner asks for whole fragments of at least this many env steps in all:
#: a message per 20- or 32-step fragment of one sub-env cost more than its sampling
#: (`EnvRunner.sample(fragments=k)`; benchmarks/README.md, async_throughput)
MIN_STEPS_PER_REQUEST = 128

#: the longest reporting window when no update happens in it (seconds)
STALLED_WINDOW_S = 30.0

#: float arrays of a fragment that must be finite to be learned on
FINITE_KEYS = ("obs", "rewards", "logp", "values", "trunc_values", "last_values")


# --------------------------------------------------------------------------- the loss terms


def vtrace(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, rewards: torch.Tensor,
           values: torch.Tensor, next_values: torch.Tensor, discounts: torch.Tensor,
           continues: torch.Tensor, clip_rho_threshold: float = 1.0, clip_pg_rho_threshold: float = 1.0,
           clip_c_threshold: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets `vs` and policy-gradient advantages, all [T, B] (time-major).

    behaviour_logp, target_logp: log mu(a_t|x_t) and log pi(a_t|x_t).
    values: V(x_t). next_values: V(x_{t+1}) where the episode goes on (for the last
        step, the bootstrap value), V(final obs) where it was cut, anything where it ended.
    discounts: gamma where the episode goes on or was cut, 0 where it terminated.
    continues: True where x_{t+1} is the next row of the same episode (False at episode
        ends and at the last row): the trace goes on through it.

        delta_t = rho_t (r_t + d_t next_values_t - V(x_t)),  rho_t = min(rho_bar, pi/mu)
        vs_t    = V(x_t) + delta_t + d_t c_t (vs_{t+1} - V(x_{t+1}))   [where continues]
        adv_t   = min(pg_rho_bar, pi/mu) (r_t + d_t vs'_{t+1} - V(x_t))

    with c_t = min(c_bar, pi/mu) and vs'_{t+1} = vs_{t+1} where continues, else
    next_values_t. On-policy with rho_bar, c_bar >= 1, vs_t is the n-step return."""
    rhos = torch.exp(target_logp - behaviour_logp)
    clipped_rhos = rhos.clamp(max=clip_rho_threshold)
    cs = rhos.clamp(max=clip_c_threshold)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)
    carry = discounts * cs * continues.to(values.dtype)
    vs_minus_v = torch.empty_like(values)
    acc = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + carry[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v
    vs_next = torch.where(continues, torch.cat([vs[1:], vs[-1:]]), next_values)
    pg_advantages = rhos.clamp(max=clip_pg_rho_threshold) * (rewards + discounts * vs_next - values)
    return vs, pg_advantages


def vtrace_targets(batch: dict[str, torch.Tensor], values: torch.Tensor, target_logp: torch.Tensor,
                   hp: IMPALATrainingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace on one [T, B] batch (`vtrace=False`: the importance weights are 1, so
    the targets are plain n-step returns)."""
    term, trunc = batch["terminateds"], batch["truncateds"]
    next_values = torch.cat([values[1:], batch["last_values"][None]])
    next_values = torch.where(trunc, batch["trunc_values"], next_values)
    discounts = hp.gamma * (~term).to(values.dtype)
    continues = ~(term | trunc)
    continues[-1] = False
    behaviour = batch["logp"] if hp.vtrace else target_logp
    return vtrace(behaviour, target_logp, batch["rewards"], values, next_values, discounts, continues,
                  hp.vtrace_clip_rho_threshold, hp.vtrace_clip_pg_rho_threshold)


def policy_gradient_term(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """-log pi(a|x) * advantage, summed over the valid steps (`mask`)."""
    return -(logp * advantages * mask).sum()


def value_term(values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """0.5 (target - V(x))^2, summed over the valid steps."""
    return 0.5 * (((targets - values) ** 2) * mask).sum()


def entropy_term(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The policy's entropy, summed over the valid steps (a bonus: subtracted)."""
    return (entropy * mask).sum()


def evaluate_time_major(model: torch.nn.Module, batch: dict[str, torch.Tensor]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's log pi(a_t|x_t) of the batch's actions, entropies and values V(x_t), [T, B]."""
    if getattr(model, "recurrent", False):  # unrolled from each column's state_in
        return model.evaluate_sequence(batch)
    t_len, width = batch["rewards"].shape
    obs = batch["obs"].reshape(t_len * width, -1)
    actions = batch["actions"].reshape((t_len * width, *batch["actions"].shape[2:]))
    logp, entropy, values = model.evaluate(obs, actions)
    return logp.reshape(t_len, width), entropy.reshape(t_len, width), values.reshape(t_len, width)


def impala_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                hp: IMPALATrainingConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """IMPALA's loss of one [T, B] batch: the policy-gradient term on V-trace advantages
    + vf_loss_coeff * the value term on V-trace targets - entropy_coeff * the entropy
    term, summed over valid steps (divide by their count outside). Returns the sum and
    its terms (detached)."""
    logp, entropy, values = evaluate_time_major(model, batch)
    with torch.no_grad():
        vs, pg_adv = vtrace_targets(batch, values.detach(), logp.detach(), hp)
    mask = batch["valid"].to(values.dtype)
    policy_loss = policy_gradient_term(logp, pg_adv, mask)
    vf_loss = value_term(values, vs, mask)
    entropy_sum = entropy_term(entropy, mask)
    loss = policy_loss + hp.vf_loss_coeff * vf_loss - hp.entropy_coeff * entropy_sum
    return loss, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(), "entropy": entropy_sum.detach()}


# --------------------------------------------------------------------------- batches


def time_major(fragments: Sequence[dict[str, Any]], device: torch.device) -> list[dict[str, torch.Tensor]]:
    """Fragments as [T, B] tensors, side by side along B (one dict per fragment length T)."""
    by_length: dict[int, list[dict[str, Any]]] = {}
    for frag in fragments:
        by_length.setdefault(int(frag["rewards"].shape[0]), []).append(frag)
    out = []
    for group in by_length.values():
        batch: dict[str, torch.Tensor] = {}
        for key in ("obs", "actions", "rewards", "logp", "values", "trunc_values", "terminateds", "truncateds",
                    "valid", *([BYTES_KEY] if BYTES_KEY in group[0] else [])):
            arrays = [f[key] for f in group]
            if key == "obs":
                arrays = [a.reshape(a.shape[0], a.shape[1], -1) for a in arrays]
            joined = np.concatenate(arrays, axis=1)
            if joined.dtype == np.float64:
                joined = joined.astype(np.float32)
            batch[key] = to_device(joined, device)
        batch["last_values"] = to_device(np.concatenate([np.asarray(f["last_values"], np.float32) for f in group]),
                                         device)
        for key in RECURRENT_KEYS:  # a recurrent policy's: what each column's first step read
            if key in group[0]:  # (the first sequence's: IMPALA unrolls the whole fragment)
                batch[key] = to_device(np.concatenate([np.asarray(f[key])[:, 0] for f in group]), device)
        out.append(batch)
    return out


def steps_per_epoch(num_samples: int, minibatch_size: int | None) -> int:
    """Gradient steps in one pass over a batch of `num_samples` env steps."""
    if minibatch_size is None:
        return 1
    return max(1, num_samples // minibatch_size)


def column_subsets(batches: list[dict[str, torch.Tensor]],
                   columns: list[tuple[int, int]]) -> list[dict[str, torch.Tensor]]:
    """The [T, b] sub-batches of `batches` made of the (batch, column) pairs in `columns`."""
    chosen: dict[int, list[int]] = {}
    for g, c in columns:
        chosen.setdefault(g, []).append(c)
    out = []
    for g, cols in sorted(chosen.items()):
        batch = batches[g]
        if len(cols) == batch["rewards"].shape[1]:
            out.append(batch)
            continue
        index = torch.as_tensor(sorted(cols), device=batch["rewards"].device)
        out.append({k: v.index_select(0 if k in PER_ENV_KEYS else 1, index) for k, v in batch.items()})
    return out


class IMPALALearner(Learner):
    """One gradient step per train batch (this rank's shard of it in a mesh)."""

    rank_invariant_stats = ("grad_norm", "lr", "num_sgd_steps")

    def make_optimizer(self, flat: torch.nn.Parameter) -> FlatAdam | FlatRMSProp:
        hp = self.hp
        if hp.opt_type in ("rmsprop", "rmsprop_tf"):
            return FlatRMSProp(flat, lr=hp.lr, tf_style=hp.opt_type == "rmsprop_tf", **self.optimizer_settings())
        return FlatAdam(flat, lr=hp.lr, **self.optimizer_settings())

    def optimizer_settings(self) -> dict[str, float]:
        hp = self.hp
        if hp.opt_type in ("rmsprop", "rmsprop_tf"):
            return {"alpha": hp.decay, "eps": hp.epsilon, "momentum": hp.momentum}
        return {"eps": hp.epsilon}

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        """The summed loss of one [T, B] batch and its statistics (APPO overrides)."""
        return impala_loss(self.model, batch, self.hp)

    @classmethod
    def split_update(cls, config: IMPALAConfig, fragments: Sequence[dict[str, np.ndarray]],
                     num_members: int) -> tuple[list[list[dict[str, np.ndarray]]], dict[str, Any]]:
        """A shard per member, and the gradient steps per epoch of the WHOLE batch, which
        every member takes on its shard (the same number of all-reduces on every rank)."""
        shards, _ = super().split_update(config, fragments, num_members)
        n_total = int(sum(int(f["valid"].sum()) for f in fragments))
        return shards, {"sgd_steps_per_epoch": steps_per_epoch(n_total, config.training_cfg.minibatch_size)}

    def update(self, fragments: Sequence[dict[str, Any]], env_steps_sampled: int = 0,
               sgd_steps_per_epoch: int | None = None) -> dict[str, Any]:
        """`num_epochs` passes of gradient steps over the fragments (each step on whole env
        columns, V-trace recomputed with the current values); returns learner metrics."""
        start = time.perf_counter()
        hp = self.hp
        batches = [join_bytes(b, self.spec) for b in time_major(fragments, self.device)] if fragments else []
        n = int(sum(int(b["valid"].sum()) for b in batches))
        if n == 0 and self.allreduce is None:
            return {"num_samples": 0, "weights_version": self.version}
        steps = sgd_steps_per_epoch if self.allreduce is not None else steps_per_epoch(n, hp.minibatch_size)
        lr = scheduled(hp.lr, hp.lr_schedule, env_steps_sampled)
        self.set_optimizer_settings(lr)
        reduce_buf = self.new_reduce_buffer()
        columns = [(g, c) for g, b in enumerate(batches) for c in range(b["rewards"].shape[1])]
        stats: dict[str, float] = {}
        grad_norms: list[float] = []
        summed = hp.loss_reduction == "sum"  # RLlib's TF IMPALA: the gradient of the summed loss
        self.model.train()
        for _ in range(hp.num_epochs):
            parts = [np.arange(len(columns))] if steps == 1 else np.array_split(self.rng.permutation(len(columns)),
                                                                               steps)
            for part in parts:
                total, n_part = None, 0
                for sub in column_subsets(batches, [columns[i] for i in part]):
                    loss, step_stats = self.loss(sub)
                    total = loss if total is None else total + loss
                    n_part += int(sub["valid"].sum())
                    for key, value in step_stats.items():
                        stats[key] = stats.get(key, 0.0) + float(value)
                if total is None or n_part == 0:  # an empty share of this step: contribute nothing
                    grad_norms.append(self.apply_gradient(None, 0, reduce_buf, summed=summed))
                    continue
                grad_norms.append(self.apply_gradient(total / n_part, n_part, reduce_buf, summed=summed))
        self.model.eval()
        self.version += 1
        self.num_updates += 1
        self.after_update()
        passes = max(1, n * hp.num_epochs)
        out: dict[str, Any] = {k: v / passes for k, v in stats.items()}
        out.update({"grad_norm": float(np.mean(grad_norms)) if grad_norms else 0.0, "lr": lr, "num_samples": n,
                    "num_sgd_steps": steps * hp.num_epochs, "weights_version": self.version,
                    "learn_time_s": time.perf_counter() - start})
        return out

    def after_update(self) -> None:
        """Hook after each step (APPO: the target network)."""


def add_sampled(to: TrainBatch | AsyncLearner, fragment: dict[str, Any], result: dict[str, Any]) -> None:
    """A runner's usable fragment into a batch, with the weights versions (its first step's,
    its steps' mean) and the env steps its sample result reports."""
    to.add(fragment, int(result.get("weights_version", -1)), int(result.get("env_steps", 0)),
           result.get("weights_version_mean"))


class IMPALA(Algorithm):
    """IMPALA's driver: the asynchronous data path on the Algorithm base (the module
    docstring). `self.learner` is the in-process learner or the elastic learner group;
    `self.learner_access` the learner thread in front of it (`AsyncLearner`), or, with
    `deterministic`, the driver's own thread (`DirectAccess`)."""

    learner_class_path = "ftrl.rl.algorithms.impala:IMPALALearner"
    learner_cls: type[IMPALALearner] = IMPALALearner
    #: what the driver state keeps of IMPALA's own (`RunState.algo_counters`)
    algo_counter_names = ("num_samples_dropped_stale", "env_steps_dropped_stale", "num_samples_invalid")

    def __init__(self, config: IMPALAConfig, **kwargs: Any) -> None:
        self._round_out = False  # deterministic: a round of samples is in flight
        super().__init__(config, **kwargs)

    def setup_learner(self) -> IMPALALearner:
        return self.learner_cls(self.config, self.spec)

    def setup_learner_access(self, learner: Any) -> LearnerAccess:
        """The learner thread; with `deterministic`, the driver's own thread. Staleness is
        the learner's call either way (`max_policy_lag`)."""
        t = self.config.training_cfg
        if t.deterministic:
            return DirectAccess(learner, stale_version_gap=lambda: self.config.training_cfg.max_policy_lag)
        return AsyncLearner(learner, queue_size=t.learner_queue_size, max_policy_lag=t.max_policy_lag,
                            broadcast_interval=t.broadcast_interval, batch_env_steps=t.train_batch_size,
                            env_steps_sampled=lambda: self.run_state.env_steps_sampled,
                            counters=self.run_state.algo_counters, locked_reads=self.learner_group is None)

    def runner_weights_lag(self) -> int:
        """The runner group keeps every sample (the learner drops stale ones); deterministic:
        it samples with the current weights only."""
        return 0 if self.config.training_cfg.deterministic else 1 << 30

    # ------------------------------------------------------------------ one reporting window

    def training_iteration(self) -> dict[str, Any]:
        if self.config.training_cfg.deterministic:
            return self._pipelined_update()
        learner = self.learner_access
        assert isinstance(learner, AsyncLearner)
        t0 = time.monotonic()
        min_time = self.config.reporting_cfg.min_time_s_per_iteration
        window = 1.0 if min_time is None else float(min_time)
        # a window with no update (every sample dropped, a learner mesh re-forming) still
        # ends and is reported (num_learner_updates_this_iter 0) after this long
        longest = max(10.0 * window, STALLED_WINDOW_S)
        updates_before = learner.num_updates
        sample_s = 0.0
        while True:
            t = time.monotonic()
            self._sample_into_queue(learner)
            sample_s += time.monotonic() - t
            elapsed = time.monotonic() - t0
            if (learner.num_updates > updates_before and elapsed >= window) or elapsed >= longest:
                break
        stats = learner.take_window()
        self.env_steps_trained += int(stats.pop("env_steps_trained_this_iter"))
        stats["timers"] = {"sample_s": sample_s, "iteration_s": time.monotonic() - t0}
        return {**stats, **self.run_state.algo_counters}

    def _sample_into_queue(self, learner: AsyncLearner) -> None:
        """Take what the runners finished (sampling on with the newest published weights),
        fill train batches, queue the full ones (waiting while the queue is full)."""
        learner.raise_error()
        if self.runners.sampling_version() != learner.weights_for_runners()[0]:
            self.sync_weights()  # runners pick the newest weights up between fragments
        results: list[dict[str, Any]] = []
        runner, group = self.local_runner, self.env_runner_group
        if runner is not None:
            results.append(runner.sample())
        else:
            assert group is not None
            if not group.healthy():
                group.wait_for_healthy()
            # at the version just synced; each runner samples its next fragment ahead, and
            # short fragments of few sub-envs come several to a reply (fewer messages)
            run = self.config.env_runners_cfg
            fragment_steps = self.config.get_rollout_fragment_length() * run.num_envs_per_env_runner
            fragments = max(1, -(-MIN_STEPS_PER_REQUEST // fragment_steps))
            results = group.harvest(prefetch=run.sample_ahead, fragments=fragments).results
            if not results:
                group.wait_any(0.05)
        for result in results:
            fragment = self._usable_fragment(result)
            if fragment is not None:
                add_sampled(learner, fragment, result)
        learner.queue_full_batches(while_full=self._poll_recoveries)  # back-pressure: the runners wait

    def _poll_recoveries(self) -> None:
        if self.env_runner_group is not None:
            self.env_runner_group.poll_recoveries()

    def _usable_fragment(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """Bookkeeping for one sample result; its fragment, unless it is not to be used."""
        self.run_state.record_sample(result)
        if result.get("dropped", False):
            return None
        fragment = result["batch"]
        return fragment if self._usable(fragment, result) else None

    def _usable(self, fragment: dict[str, Any], result: dict[str, Any]) -> bool:
        """A malformed fragment, or one with NaN or inf in it, is dropped and counted."""
        try:
            check_fragment(fragment)
            bad = [k for k in FINITE_KEYS if not np.isfinite(np.asarray(fragment[k])).all()]
        except (ValueError, TypeError) as e:
            bad = [str(e)]
        if bad:
            self.run_state.algo_counters["num_samples_invalid"] += 1
            log.warning("dropping a fragment of %s: not finite or malformed (%s)",
                        result.get("runner", "the local runner"), ", ".join(bad))
            return False
        return True

    # ------------------------------------------------------------------ deterministic: lag exactly 1

    def _pipelined_update(self) -> dict[str, Any]:
        """Collect the round sampled with the previous weights, start the next round with
        the current ones, then learn on the collected round while it samples."""
        t0 = time.monotonic()
        if not self._round_out:
            self._start_round()
        results = self._collect_round()
        self._start_round()
        t1 = time.monotonic()
        current = self.learner_version
        batch = TrainBatch()
        for result in sorted(results, key=lambda r: int(r.get("worker_index", 0))):
            fragment = self._usable_fragment(result)
            if fragment is not None:
                add_sampled(batch, fragment, result)
        counters = self.run_state.algo_counters
        fragments, lags = within_lag(batch, current, self.config.training_cfg.max_policy_lag, counters)
        learn: dict[str, Any] = {"num_samples": 0, "weights_version": current}
        if fragments:
            learn = self.learner.update(fragments, env_steps_sampled=self.env_steps_sampled)
        self.env_steps_trained += int(learn.get("num_samples", 0))
        t2 = time.monotonic()
        stats = {
            "learner": learn,
            "num_learner_updates_this_iter": 1 if fragments else 0,
            **lag_stats(lags),
            "learner_queue_depth": 0,
            "learner_busy_share": (t2 - t1) / max(1e-9, t2 - t0),
            "timers": {"sample_s": t1 - t0, "learn_s": t2 - t1},
        }
        return {**stats, **counters}

    def _start_round(self) -> None:
        """Sync the learner's weights; one sample request to every healthy runner."""
        group = self.env_runner_group
        assert group is not None
        self.sync_weights()
        group.wait_for_healthy()
        group.harvest(current_version=self.learner_version)
        self._round_out = True

    def _collect_round(self) -> list[dict[str, Any]]:
        """Every request of the round in flight (until the sample timeout)."""
        group = self.env_runner_group
        assert group is not None
        results: list[dict[str, Any]] = []
        deadline = time.monotonic() + self.config.env_runners_cfg.sample_timeout_s
        while True:
            results += group.harvest(current_version=group.latest_version, request_steps=0).results
            remaining = deadline - time.monotonic()
            if group.in_flight() == 0 or remaining <= 0:
                return results
            group.wait_any(min(0.5, remaining))
