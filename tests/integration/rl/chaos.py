"""Chaos for `ftrl train` processes: a runner SIGKILLed every second while the run goes on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

from tests.integration.rl.test_train_driver import _actors


def sigkill_a_runner_every_second(proc: subprocess.Popen, job: str, max_kills: int, seed: int = 0) -> int:
    """While `proc` runs: every second SIGKILL one of `job`'s env runner processes (a seeded
    random pick), at most `max_kills` times; returns how many hit a live process."""
    rng, kills = random.Random(seed), 0
    while proc.poll() is None and kills < max_kills:
        runners = {n: p for n, p in _actors(job).items() if "/env_runner/" in n}
        if runners:
            try:
                os.kill(runners[rng.choice(sorted(runners))], signal.SIGKILL)
                kills += 1
            except ProcessLookupError:
                pass
        time.sleep(1.0)
    return kills
