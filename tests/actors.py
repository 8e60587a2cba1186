"""Actor classes for the tests. Actor processes import them as `tests.actors:NAME`,
so the repo root must be on their PYTHONPATH (the cluster fixtures see to that)."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np

from ftrl.client.context import get_runtime_context


class Counter:
    """A small stateful actor with a method for every kind of behaviour the tests need."""

    def __init__(self, start: int = 0) -> None:
        self.n = start

    def incr(self, k: int = 1) -> int:
        self.n += k
        return self.n

    def get(self) -> int:
        return self.n

    def pid(self) -> int:
        return os.getpid()

    def say(self, text: str, times: int = 1) -> int:
        """Print `text` (to the actor's log file) `times` times; returns the bytes written."""
        for _ in range(times):
            print(text, flush=True)
        return (len(text) + 1) * times

    def whoami(self) -> dict:
        ctx = get_runtime_context()
        assert ctx is not None
        return {"name": ctx.name, "incarnation": ctx.incarnation, "node_id": ctx.node_id,
                "restarts": ctx.restarts, "pid": os.getpid()}

    def getenv(self, key: str) -> str | None:
        """This actor's environment variable `key` (e.g. the CUDA_VISIBLE_DEVICES it was given)."""
        return os.environ.get(key)

    def sleep(self, seconds: float) -> float:
        """A long synchronous call: it runs off the event loop, so pings are answered."""
        time.sleep(seconds)
        return seconds

    async def block_loop(self, seconds: float) -> float:
        """Wedges the actor's own event loop (what a hang looks like)."""
        time.sleep(seconds)  # noqa: ASYNC251 (on purpose)
        return seconds

    async def aincr(self, k: int = 1) -> int:
        await asyncio.sleep(0)
        self.n += k
        return self.n

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def crash(self, code: int = 13) -> None:
        os._exit(code)

    def echo(self, value):
        return value

    def total(self, arr: np.ndarray) -> float:
        return float(np.asarray(arr).sum())

    def unencodable(self):
        return object()

    def __ftrl_state__(self) -> dict:
        return {"n": self.n}

    def __ftrl_restore__(self, state: dict) -> None:
        self.n = state["n"]


class BadInit:
    """Its constructor always raises."""

    def __init__(self, **kwargs) -> None:
        raise RuntimeError(f"BadInit refuses to start (kwargs {sorted(kwargs)})")


def not_a_class() -> None:
    """A class path may not name a function."""


class Drainable(Counter):
    """A Counter with a drain hook: `__ftrl_drain__` writes `marker + ".started"`, waits
    `drain_s` seconds, then writes `marker` (its name, incarnation and pid)."""

    def __init__(self, marker: str, drain_s: float = 0.0, start: int = 0) -> None:
        super().__init__(start)
        self.marker = marker
        self.drain_s = drain_s

    def __ftrl_drain__(self) -> None:
        ctx = get_runtime_context()
        text = f"{ctx.name if ctx else '?'} {ctx.incarnation if ctx else 0} {os.getpid()}"
        with open(self.marker + ".started", "w") as f:
            f.write(text)
        time.sleep(self.drain_s)
        with open(self.marker + ".tmp", "w") as f:
            f.write(text)
        os.replace(self.marker + ".tmp", self.marker)
