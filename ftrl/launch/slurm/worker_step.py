"""The worker step: one task per node runs that node's `ftrl worker` and starts it again
when it dies (bounded, with backoff), until it drains or a signal comes."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftrl.launch.slurm.allocation import node_addr
from ftrl.launch.slurm.base import (
    NODE_PREFIX,
    POLL_S,
    WORKER_MAX_RESTARTS,
    WORKER_RESTART_POLICY,
    WORKER_STEP_STOP_MARGIN_S,
    say,
)
from ftrl.launch.slurm.processes import child_env, start_process, wait_or_kill
from ftrl.util.restart_policy import RestartPolicy


@dataclass
class WorkerSupervisor:
    """One node's worker, started again when it dies (bounded); see `ftrl.launch.slurm`'s docstring."""

    argv: list[str]
    env: Mapping[str, str]
    log: Path
    node_id: str
    max_restarts: int = WORKER_MAX_RESTARTS
    drain_timeout_s: float = 60.0
    policy: RestartPolicy = WORKER_RESTART_POLICY
    signum: int = 0
    restarts: int = 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Not passed on: SLURM signals every process of the step, the worker included (a
        # second SIGTERM would make a draining worker stop at once).
        if not self.signum:
            self.signum = signum

    def run(self) -> int:
        """Run the worker until it drains, a signal comes or no restart is left (the exit status)."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        streak = 0
        while True:
            started = time.monotonic()
            proc = start_process(self.argv, self.env, self.log)
            say(f"{self.node_id}: worker pid {proc.pid} started (log {self.log})")
            code = self._wait(proc)
            if code == 0 or self.signum:
                say(f"{self.node_id}: worker exited with status {code}" + (" (drained)" if code == 0 else ""))
                return 0 if code == 0 else 128 + self.signum
            if not RestartPolicy.has_budget(self.restarts, self.max_restarts):
                say(f"{self.node_id}: worker exited with status {code}; no restart left "
                    f"({self.restarts} of {self.max_restarts} used)")
                return 1
            streak = self.policy.next_streak(streak, time.monotonic() - started)
            delay = self.policy.delay(streak)
            self.restarts += 1
            say(f"{self.node_id}: worker exited with status {code}; restart {self.restarts} of "
                f"{self.max_restarts} in {delay:.0f}s")
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline and not self.signum:
                time.sleep(POLL_S)
            if self.signum:
                return 128 + self.signum

    def _wait(self, proc: subprocess.Popen) -> int:
        """The worker's exit status; once a signal came, at most its drain (then SIGKILL)."""
        while True:
            try:
                return proc.wait(POLL_S)
            except subprocess.TimeoutExpired:
                pass
            if self.signum:
                wait_or_kill(proc, self.drain_timeout_s + WORKER_STEP_STOP_MARGIN_S)
                return proc.returncode


def worker_argv(python: str, args: argparse.Namespace, node: str, address: str, slots: int | None) -> list[str]:
    """`ftrl worker` for this node (the node id stays the same across restarts and requeues)."""
    node_id = f"{NODE_PREFIX}{node}"
    argv = [python, "-m", "ftrl", "--log-level", args.log_level, "worker", "--coordinator", args.coordinator,
            "--node-id", node_id, "--address", address,
            "--log-dir", str(Path(args.run_dir) / "logs" / node_id),
            "--drain-timeout", f"{args.drain_timeout:g}", "--token-file", args.token_file]
    if slots:
        argv += ["--slots", str(slots)]
    return argv + list(args.worker_args)


def worker_parser() -> argparse.ArgumentParser:
    """The arguments of `python -m ftrl.launch.slurm worker` (BatchPlan.worker_step_argv)."""
    p = argparse.ArgumentParser(prog="ftrl.launch.slurm worker")
    p.add_argument("--coordinator", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--drain-timeout", type=float, default=60.0)
    p.add_argument("--max-restarts", type=int, default=WORKER_MAX_RESTARTS)
    p.add_argument("--log-level", default="INFO")
    p.add_argument("worker_args", nargs="*", help="extra `ftrl worker` arguments (after --)")
    return p


def run_worker(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """`python -m ftrl.launch.slurm worker ...`: one task of the worker step."""
    env = os.environ if env is None else env
    args = worker_parser().parse_args(argv)
    os.umask(0o077)
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    slots = None
    with contextlib.suppress(ValueError):
        slots = int(env.get("SLURM_CPUS_ON_NODE") or 0) or None
    node_id = f"{NODE_PREFIX}{node}"
    sup = WorkerSupervisor(worker_argv(sys.executable, args, node, node_addr(node), slots), child_env(env),
                           Path(args.run_dir) / "logs" / f"worker-{node_id}.log", node_id,
                           max_restarts=args.max_restarts, drain_timeout_s=args.drain_timeout)
    return sup.run()
