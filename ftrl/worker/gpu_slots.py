"""Which of this node's GPUs each actor gets (its CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Iterable

from ftrl.util.gpus import parse_visible_devices
from ftrl.wire.errors import ConfigError
from ftrl.worker.local_actor import LocalActor

GPU_WAIT_S = 5.0


def visible_gpu_names(gpus: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries of this node's GPUs 0..gpus-1: the worker's own
    CUDA_VISIBLE_DEVICES when it was started with one (SLURM's gres, a shared node)."""
    if gpus < 0:
        raise ConfigError(f"--gpus must be >= 0, got {gpus}")
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        return [str(i) for i in range(gpus)]
    visible = parse_visible_devices(os.environ["CUDA_VISIBLE_DEVICES"])
    if gpus > len(visible):
        raise ConfigError(f"--gpus {gpus}, but this worker's CUDA_VISIBLE_DEVICES="
                          f"{os.environ['CUDA_VISIBLE_DEVICES']!r} lists {len(visible)}")
    return visible[:gpus]


class GpuSlots:
    """This node's `count` GPUs: whole ones free for the taking, fractions shared."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.free = list(range(count))
        self.names = visible_gpu_names(count)  # ConfigError for a bad count

    async def assign(self, la: LocalActor, actors: Iterable[LocalActor]) -> str:
        """CUDA_VISIBLE_DEVICES for the actor: whole GPUs of its own, a shared one for a
        fraction, none for gpu=0. GPUs of a stopping actor are waited for (bounded).
        `actors`: every actor on this node (what the shared GPUs carry)."""
        want = float(la.spec.resources.get("gpu", 0.0))
        if want <= 0:
            return ""
        if want < 1:
            load = {i: 0.0 for i in range(self.count)}
            for other in actors:
                for i in other.gpu_ids:
                    load[i] = load.get(i, 0.0) + min(1.0, float(other.spec.resources.get("gpu", 1)))
            if not load:
                raise RuntimeError("this node has no GPU")
            la.gpu_ids, la.gpu_shared = [min(load, key=load.get)], True
            return self.names[la.gpu_ids[0]]
        need = math.ceil(want)
        deadline = time.monotonic() + GPU_WAIT_S
        while len(self.free) < need:
            if time.monotonic() > deadline:
                raise RuntimeError(f"needs {need} GPUs, {len(self.free)} free on this node")
            await asyncio.sleep(0.05)
        la.gpu_ids, self.free = self.free[:need], self.free[need:]
        return ",".join(self.names[i] for i in la.gpu_ids)

    def release(self, la: LocalActor) -> None:
        """Give back what `la` holds (a shared GPU was never taken from the free list)."""
        if not la.gpu_shared:
            self.free.extend(la.gpu_ids)
        la.gpu_ids, la.gpu_shared = [], False
