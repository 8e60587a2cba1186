"""Capped exponential backoff for restarts and reconnects."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Backoff:
    """Delays base, 2*base, 4*base ... capped at `cap`, with +-`jitter` fraction noise.

    `reset()` after a success. The first delay can be zero (`first_free=True`) so a
    process that crashes once after running a long time comes back at once.
    """

    base: float = 0.1
    cap: float = 2.0
    jitter: float = 0.1
    first_free: bool = False
    attempts: int = 0

    def next_delay(self) -> float:
        n = self.attempts
        self.attempts += 1
        if self.first_free:
            if n == 0:
                return 0.0
            n -= 1
        delay = min(self.cap, self.base * (2**n))
        if self.jitter:
            delay *= 1.0 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, delay)

    def reset(self) -> None:
        self.attempts = 0


def restart_delay(restarts_in_a_row: int, base: float = 0.1, cap: float = 2.0) -> float:
    """Delay before restarting an actor that crashed `restarts_in_a_row` times quickly.

    0 for the first crash (restart at once), then base * 2^(n-1), capped.
    """
    if restarts_in_a_row <= 0:
        return 0.0
    return min(cap, base * (2 ** (restarts_in_a_row - 1)))
