"""Tiny actor classes used by the benchmarks."""

from __future__ import annotations

import os

import numpy as np


class Echo:
    def __init__(self) -> None:
        self.calls = 0

    def ping(self) -> int:
        self.calls += 1
        return self.calls

    def pid(self) -> int:
        return os.getpid()

    def echo(self, x):
        return x

    def take(self, x) -> int:
        return int(getattr(x, "nbytes", 0))

    def give(self, nbytes: int):
        return np.ones(nbytes // 8, dtype=np.float64)

    async def aping(self) -> int:
        self.calls += 1
        return self.calls
