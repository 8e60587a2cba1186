"""Sample batches: plain dicts of numpy arrays.

A *fragment* is what one EnvRunner.sample() returns: time-major arrays of shape
[T, E, ...] (T = rollout_fragment_length steps, E = sub-envs) under these keys:

    obs           [T, E, D] float32 or uint8   observation the action was chosen on, a flat row
                                               (uint8: pixels, a byte Box with no filter)
    actions       [T, E, *act_shape]           int64 (Discrete) or float32 (Box, unclipped)
    rewards       [T, E] float32
    terminateds   [T, E] bool                  episode ended in a terminal state
    truncateds    [T, E] bool                  episode cut (time limit or sub-env failure)
    logp          [T, E] float32               log-prob of the action under the behaviour policy
    values        [T, E] float32               V(obs)
    trunc_values  [T, E] float32               V(final obs) where truncated by a time limit, else 0
    valid         [T, E] bool                  False for the step a failed sub-env never finished
    episode_ids   [T, E] int64
    last_values   [E] float32                  V(obs after the fragment), to bootstrap

and, from a recurrent policy (`use_lstm`), what each sub-env's steps 0, L, 2L, ... read
(L = max_seq_len; K = ceil(T / L) sequences; IMPALA and APPO use the first, PPO each):

    state_in        [E, K, S] float32          the LSTM state (zero at an episode's start)
    prev_action_in  [E, K, *act_shape]         the action before it (zero at an episode's start)
    prev_reward_in  [E, K] float32             the reward before it (zero at an episode's start)

A structured observation with uint8 leaves (images in a Dict) sends them as bytes apart
from its float columns: "obs" then holds the float columns only and

    obs_bytes     [T, E, B] uint8              the uint8 leaves' columns, in row order

(`pack_bytes`); the learner puts them back among the float ones, as float, on its device.

A *train batch* is flat: every array is [N, ...] after `flatten_fragment`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

SampleBatch = dict[str, np.ndarray]

#: What a recurrent policy's fragments add: one row per sub-env.
RECURRENT_KEYS = ("state_in", "prev_action_in", "prev_reward_in")
#: Keys of one row per sub-env ([E, ...]), not per step: split along E, never flattened.
PER_ENV_KEYS = ("last_values", *RECURRENT_KEYS)

TIME_MAJOR_KEYS = (
    "obs",
    "actions",
    "rewards",
    "terminateds",
    "truncateds",
    "logp",
    "values",
    "trunc_values",
    "valid",
    "episode_ids",
)


#: Where a structured observation's uint8 columns travel (see the module docstring).
BYTES_KEY = "obs_bytes"


def pack_bytes(fragment: SampleBatch, byte_columns: Sequence[int]) -> SampleBatch:
    """The fragment with its observations' `byte_columns` (of a full float32 row) moved
    to BYTES_KEY as uint8 (they hold whole numbers 0..255: the cast is exact); as it is
    without such columns or when its observations are bytes already."""
    obs = fragment["obs"]
    if not byte_columns or obs.dtype == np.uint8:
        return fragment
    keep = np.ones(obs.shape[-1], bool)
    keep[np.asarray(byte_columns, np.int64)] = False
    return {**fragment, "obs": obs[..., keep], BYTES_KEY: obs[..., ~keep].astype(np.uint8)}


def stack_fragments(fragments: Sequence[SampleBatch | None]) -> SampleBatch:
    """Fragments of the same length and sub-envs side by side along the env axis: [T,
    k * E, ...] (per-env keys [k * E, ...]). One is returned as it is."""
    if len(fragments) == 1:
        assert fragments[0] is not None
        return fragments[0]
    first = fragments[0]
    assert first is not None and all(f is not None for f in fragments)
    return {key: np.concatenate([f[key] for f in fragments], axis=0 if key in PER_ENV_KEYS else 1)  # type: ignore[index]
            for key in first}


def env_steps(fragment: Mapping[str, np.ndarray]) -> int:
    """Number of env steps in a time-major fragment (T * E)."""
    rewards = fragment["rewards"]
    return int(rewards.shape[0] * rewards.shape[1])


def concat(batches: Iterable[Mapping[str, np.ndarray]]) -> SampleBatch:
    """Concatenate flat batches along axis 0 (keys must match)."""
    batches = [b for b in batches if b]
    if not batches:
        return {}
    keys = set(batches[0])
    for b in batches[1:]:
        if set(b) != keys:
            raise ValueError(f"cannot concat batches with different keys: {sorted(keys)} vs {sorted(b)}")
    return {k: np.concatenate([b[k] for b in batches], axis=0) for k in batches[0]}


def flatten_fragment(fragment: Mapping[str, np.ndarray], extra: Mapping[str, np.ndarray] | None = None) -> SampleBatch:
    """[T, E, ...] arrays (plus `extra` of the same layout) to flat [T*E, ...] arrays."""
    out: SampleBatch = {}
    items = dict(fragment)
    if extra:
        items.update(extra)
    t, e = fragment["rewards"].shape[:2]
    for key, arr in items.items():
        if key in PER_ENV_KEYS:
            continue
        if arr.shape[:2] != (t, e):
            raise ValueError(f"{key} has shape {arr.shape}, expected [{t}, {e}, ...]")
        out[key] = arr.reshape((t * e, *arr.shape[2:]))
    return out


def select(batch: Mapping[str, np.ndarray], index: np.ndarray) -> SampleBatch:
    """Rows `index` (bool mask or int indices) of a flat batch."""
    return {k: v[index] for k, v in batch.items()}


def check_fragment(fragment: Mapping[str, np.ndarray]) -> None:
    """Raise ValueError if a fragment received from a runner is malformed."""
    missing = [k for k in (*TIME_MAJOR_KEYS, "last_values") if k not in fragment]
    if missing:
        raise ValueError(f"sample fragment is missing keys {missing}")
    t, e = fragment["rewards"].shape[:2] if fragment["rewards"].ndim == 2 else (None, None)
    if t is None:
        raise ValueError("rewards must be [T, E]")
    for key in TIME_MAJOR_KEYS:
        if tuple(fragment[key].shape[:2]) != (t, e):
            raise ValueError(f"{key} has shape {fragment[key].shape}, expected [{t}, {e}, ...]")
    if tuple(fragment["last_values"].shape) != (e,):
        raise ValueError(f"last_values has shape {fragment['last_values'].shape}, expected [{e}]")
    if BYTES_KEY in fragment and (tuple(fragment[BYTES_KEY].shape[:2]) != (t, e) or fragment[BYTES_KEY].dtype != np.uint8):
        raise ValueError(f"{BYTES_KEY} has shape {fragment[BYTES_KEY].shape} and dtype {fragment[BYTES_KEY].dtype}, "
                         f"expected [{t}, {e}, ...] uint8")
    for key in RECURRENT_KEYS:
        if key in fragment and fragment[key].shape[:1] != (e,):
            raise ValueError(f"{key} has shape {fragment[key].shape}, expected [{e}, ...]")
