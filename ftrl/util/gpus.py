"""The GPUs a process may use, found without importing torch or initializing CUDA.

A worker hands its GPUs to actors by setting each actor's CUDA_VISIBLE_DEVICES. When
the worker itself was started with CUDA_VISIBLE_DEVICES (SLURM's gres, a shared node),
its GPU i is the i-th entry of that list, not the machine's GPU i.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: One directory per GPU the NVIDIA driver manages.
NVIDIA_PROC_DIR = Path("/proc/driver/nvidia/gpus")


def parse_visible_devices(value: str) -> list[str]:
    """The entries of a CUDA_VISIBLE_DEVICES value, as CUDA reads it: comma-separated
    indices or UUIDs; the list ends at the first empty or negative entry ("", "-1": none)."""
    out: list[str] = []
    for item in value.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break
        out.append(item)
    return out


def visible_gpus(env: Mapping[str, str] | None = None, proc_dir: Path = NVIDIA_PROC_DIR) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries for the GPUs this process may use: the inherited
    CUDA_VISIBLE_DEVICES when it is set, else "0".."N-1" for the N GPUs of the NVIDIA
    driver (none without one)."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return parse_visible_devices(env["CUDA_VISIBLE_DEVICES"])
    try:
        count = sum(1 for p in proc_dir.iterdir() if p.is_dir())
    except OSError:  # no NVIDIA driver here
        count = 0
    return [str(i) for i in range(count)]
