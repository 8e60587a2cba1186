"""RNG states to and from a msgpack-friendly form (for checkpoints and the wire).

The one place that converts random-number-generator states to plain lists, dicts,
strings, ints and numpy arrays (`ftrl.wire.codec` carries those) and back:
- python's `random` module state: a list;
- numpy's legacy global state (`np.random.get_state()`): a list with a uint32 array;
- a numpy `Generator`'s bit generator state: its dict, with ints too wide for msgpack
  (PCG64's 128-bit state) as `{"__bigint__": "<decimal>"}`;
- torch's CPU generator state: a uint8 array.
`global_rng_to_wire()` / `global_rng_from_wire()` take all three global states at once.
torch is imported only when a torch state is read or set.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

_BIGINT = "__bigint__"


def python_rng_to_wire(state: tuple | None = None) -> list:
    """`random.getstate()` (or `state`) as a list."""
    version, internal, gauss = random.getstate() if state is None else state
    return [version, list(internal), gauss]


def python_rng_from_wire(state: list) -> tuple:
    """The tuple `random.setstate()` takes, from `python_rng_to_wire()` output."""
    version, internal, gauss = state
    return (int(version), tuple(int(x) for x in internal), gauss)


def numpy_global_rng_to_wire() -> list:
    """`np.random.get_state()` as [name, uint32 keys, pos, has_gauss, cached_gaussian]."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, np.asarray(keys, np.uint32), int(pos), int(has_gauss), float(cached)]


def numpy_global_rng_from_wire(state: list) -> None:
    """Set numpy's global RNG from `numpy_global_rng_to_wire()` output."""
    name, keys, pos, has_gauss, cached = state
    np.random.set_state((str(name), np.asarray(keys, np.uint32), int(pos), int(has_gauss), float(cached)))


def bitgen_state_to_wire(state: Any) -> Any:
    """A numpy bit generator state (`rng.bit_generator.state`) with its ints wider than
    64 bits as {"__bigint__": "<decimal>"} (msgpack-able)."""
    if isinstance(state, dict):
        return {k: bitgen_state_to_wire(v) for k, v in state.items()}
    if isinstance(state, int) and not isinstance(state, bool) and not -(2**63) <= state < 2**64:
        return {_BIGINT: str(state)}
    return state


def bitgen_state_from_wire(state: Any) -> Any:
    """The inverse of `bitgen_state_to_wire`."""
    if isinstance(state, dict):
        if set(state) == {_BIGINT}:
            return int(state[_BIGINT])
        return {k: bitgen_state_from_wire(v) for k, v in state.items()}
    return state


def torch_rng_to_wire() -> np.ndarray:
    """torch's CPU generator state as a uint8 array."""
    import torch

    return torch.get_rng_state().numpy().copy()


def torch_rng_from_wire(state: Any) -> None:
    """Set torch's CPU generator from `torch_rng_to_wire()` output."""
    import torch

    torch.set_rng_state(torch.from_numpy(np.array(state, dtype=np.uint8, copy=True)))


def global_rng_to_wire() -> dict[str, Any]:
    """The global python, numpy and torch RNG states."""
    return {
        "python": python_rng_to_wire(),
        "numpy": numpy_global_rng_to_wire(),
        "torch": torch_rng_to_wire(),
    }


def global_rng_from_wire(rng: dict[str, Any]) -> None:
    """Set the global RNG states from `global_rng_to_wire()` output (missing keys: left as is)."""
    if "python" in rng:
        random.setstate(python_rng_from_wire(rng["python"]))
    if "numpy" in rng:
        numpy_global_rng_from_wire(rng["numpy"])
    if "torch" in rng:
        torch_rng_from_wire(rng["torch"])
