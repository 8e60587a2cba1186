"""Actors and modules for the fork server's tests (`tests.fork_actors:Probe`)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.actors import Counter


class Probe(Counter):
    """A Counter that tells how its process was made and can leave an orphan behind."""

    def __init__(self, start: int = 0) -> None:
        super().__init__(start)
        self.children: list[subprocess.Popen] = []

    def origin(self) -> dict:
        """pid, parent pid and the module this process was started as (sys.argv[0]):
        a forked spare keeps the fork server's, `.../ftrl/worker/zygote.py`."""
        return {"pid": os.getpid(), "ppid": os.getppid(), "argv0": sys.argv[0]}

    def spawn_sleeper(self, seconds: float) -> int:
        """Start `sleep seconds` and never wait for it; its pid."""
        child = subprocess.Popen(["sleep", str(seconds)], stdin=subprocess.DEVNULL)
        self.children.append(child)
        return child.pid
