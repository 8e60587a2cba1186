"""Sharing a train batch between the members of a learner mesh."""

from __future__ import annotations

import numpy as np

from ftrl.rl.sample_batch import PER_ENV_KEYS


def split_fragments(fragments: list[dict[str, np.ndarray]], k: int) -> list[list[dict[str, np.ndarray]]]:
    """Split time-major fragments [T, E, ...] into `k` shards of about equal env steps,
    cutting fragments along the env axis where needed (columns are independent for
    GAE). A shard may be empty when there are fewer env columns than members."""
    pieces: list[dict[str, np.ndarray]] = []
    for frag in fragments:
        t, e = frag["rewards"].shape[:2]
        if e <= 1 or k == 1:
            pieces.append(frag)
            continue
        for cols in np.array_split(np.arange(e), min(k, e)):
            lo, hi = int(cols[0]), int(cols[-1]) + 1
            piece = {}
            for key, arr in frag.items():
                if key in PER_ENV_KEYS:
                    piece[key] = arr[lo:hi]
                elif isinstance(arr, np.ndarray) and arr.ndim >= 2 and arr.shape[:2] == (t, e):
                    piece[key] = arr[:, lo:hi]
                else:
                    piece[key] = arr
            pieces.append(piece)
    shards: list[list[dict[str, np.ndarray]]] = [[] for _ in range(k)]
    loads = [0] * k
    for piece in sorted(pieces, key=lambda p: -int(p["valid"].sum())):
        i = loads.index(min(loads))
        shards[i].append(piece)
        loads[i] += int(piece["valid"].sum())
    return shards
