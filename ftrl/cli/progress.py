"""The one status line per iteration that `ftrl train` shows."""

from __future__ import annotations

import math
import sys
import time
from typing import Any


class Progress:
    """One status line per iteration: rewritten in place on a terminal, else printed at
    most every `interval_s` seconds."""

    def __init__(self, stream: Any = None, interval_s: float = 5.0, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s
        self.enabled = enabled
        self._last = -math.inf
        self._open_line = False

    @staticmethod
    def format(result: dict[str, Any]) -> str:
        ret = result.get("episode_return_mean")
        ret_text = "-" if ret is None else f"{ret:.1f}"
        runners = result.get("num_env_runners", 0)
        healthy = f"{result.get('num_healthy_env_runners', 0)}/{runners}" if runners else "local"
        text = (
            f"iter {result.get('iteration', 0):>5} | steps {result.get('env_steps_sampled', 0):>10,} | "
            f"return {ret_text:>7} | runners {healthy} | restarts {result.get('num_env_runner_restarts', 0)}"
            f" (sub-env {result.get('num_sub_env_restarts', 0)}) | {result.get('time_s', 0.0):.1f}s"
        )
        if result.get("mesh_epoch"):
            text += f" | learners {result.get('num_learners', 0)} (epoch {result['mesh_epoch']})"
        ev = result.get("evaluation")
        if isinstance(ev, dict) and ev.get("episode_return_mean") is not None:
            text += f" | eval {ev['episode_return_mean']:.1f}"
        return text

    def __call__(self, result: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = self.format(result)
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
            self._open_line = True
            return
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            print(line, file=self.stream, flush=True)

    def close(self, final: dict[str, Any] | None = None) -> None:
        if self._open_line:
            self.stream.write("\n")
            self._open_line = False
        elif final is not None and self.enabled:
            print(self.format(final), file=self.stream, flush=True)
