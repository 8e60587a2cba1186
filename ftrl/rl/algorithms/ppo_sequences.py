"""PPO on a recurrent model (`use_lstm`): the train batch as sequences.

Every fragment column (one sub-env's T steps) is cut into K = ceil(T / max_seq_len)
sequences of max_seq_len steps, the last padded; each starts from the state, previous
action and reward the runner noted before its first step (`state_in` [E, K, S], ...),
and the model unrolls it as the learner of IMPALA unrolls a whole fragment (the state
zeroed after a step that ended an episode). Minibatches are of whole sequences; the loss
counts only real, valid steps (`mask`: not padding, not a failed sub-env's step).

    sequence_batch   fragments -> time-major [L, N] tensors of N sequences (+ GAE)
    select           the sequences of one minibatch
    evaluate_masked  the model's log-probs, entropies and values of the masked steps, flat
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ftrl.config.ppo import PPOTrainingConfig
from ftrl.rl.sample_batch import BYTES_KEY, RECURRENT_KEYS, check_fragment

#: Keys of one value per sequence ([N, ...]); the others are time-major [L, N, ...].
PER_SEQUENCE_KEYS = RECURRENT_KEYS
_STEP_KEYS = ("obs", "actions", "rewards", "terminateds", "truncateds", "logp", "values", "adv", "returns")


def _windows(array: np.ndarray, k: int, seq_len: int) -> np.ndarray:
    """[T, E, ...] -> [L, K * E, ...]: zero-padded to K * L steps, sequence k of column e at k * E + e."""
    t, e = array.shape[:2]
    padded = np.zeros((k * seq_len, e, *array.shape[2:]), array.dtype)
    padded[:t] = array
    windows = padded.reshape(k, seq_len, e, *array.shape[2:])
    return np.moveaxis(windows, 0, 1).reshape(seq_len, k * e, *array.shape[2:])


def sequence_batch(fragments: Sequence[dict[str, Any]], hp: PPOTrainingConfig, seq_len: int, gae: Any,
                   device: torch.device, obs_dim: int, action_shape: tuple[int, ...], action_dtype: np.dtype,
                   state_size: int) -> dict[str, torch.Tensor]:
    """The fragments as sequences: time-major [L, N, ...] step keys and `mask`, [N, ...]
    start keys (`gae(fragment)` -> advantages, returns). No fragments: N = 0."""
    lam = hp.lambda_ if hp.use_gae else 1.0
    step_keys = (*_STEP_KEYS, *([BYTES_KEY] if fragments and BYTES_KEY in fragments[0] else []))
    parts: dict[str, list[np.ndarray]] = {k: [] for k in (*step_keys, "mask", *PER_SEQUENCE_KEYS)}
    for frag in fragments:
        check_fragment(frag)
        t, e = frag["rewards"].shape
        k = -(-t // seq_len)
        if frag["state_in"].shape[1] != k:
            raise ValueError(f"a fragment of {t} steps notes {frag['state_in'].shape[1]} sequence starts, "
                             f"expected {k} (max_seq_len {seq_len})")
        adv, ret = gae(frag, hp.gamma, lam)
        steps = {**{key: frag[key] for key in step_keys if key in frag}, "adv": adv, "returns": ret,
                 "obs": frag["obs"].reshape(t, e, -1), "mask": frag["valid"]}
        for key, array in steps.items():
            parts[key].append(_windows(np.asarray(array), k, seq_len))
        for key in PER_SEQUENCE_KEYS:  # [E, K, ...] -> [K * E, ...], the windows' order
            starts = np.asarray(frag[key])
            parts[key].append(np.swapaxes(starts, 0, 1).reshape(k * e, *starts.shape[2:]))
    if not fragments:
        empty = {"obs": np.zeros((seq_len, 0, obs_dim), np.float32),
                 "actions": np.zeros((seq_len, 0, *action_shape), action_dtype),
                 "terminateds": np.zeros((seq_len, 0), bool), "truncateds": np.zeros((seq_len, 0), bool),
                 "mask": np.zeros((seq_len, 0), bool), "state_in": np.zeros((0, state_size), np.float32),
                 "prev_action_in": np.zeros((0, *action_shape), action_dtype),
                 "prev_reward_in": np.zeros(0, np.float32)}
        for key in parts:
            parts[key].append(empty.get(key, np.zeros((seq_len, 0), np.float32)))
    out = {}
    for key, arrays in parts.items():
        axis = 0 if key in PER_SEQUENCE_KEYS else 1
        joined = np.concatenate(arrays, axis=axis)
        if joined.dtype == np.float64:
            joined = joined.astype(np.float32)
        out[key] = torch.from_numpy(np.ascontiguousarray(joined)).to(device)
    return out


def num_sequences(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["mask"].shape[1])


def select(batch: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """The sequences `index` of a sequence batch."""
    return {k: v.index_select(0 if k in PER_SEQUENCE_KEYS else 1, index) for k, v in batch.items()}


def evaluate_masked(model: torch.nn.Module, batch: dict[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Unroll the sequences: log-probs, entropies and values of the real, valid steps
    (flat), and the batch's own per-step values there ("logp", "values", "adv", "returns")."""
    logp, entropy, values = model.evaluate_sequence(batch)
    mask = batch["mask"]
    flat = {key: batch[key][mask] for key in ("logp", "values", "adv", "returns")}
    return logp[mask], entropy[mask], values[mask], flat
