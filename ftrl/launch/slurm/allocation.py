"""The allocation as SLURM describes it: the job's environment (`SlurmJob`), its nodes
and their addresses, and KillWait (`scontrol` output parsed)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ftrl.launch.slurm.base import SCONTROL_TIMEOUT_S, USAGE, LaunchError

DEFAULT_KILL_WAIT_S = 30.0  # SLURM's default KillWait, if `scontrol show config` says nothing


def scontrol(*args: str, timeout: float = SCONTROL_TIMEOUT_S) -> str:
    """`scontrol ARGS` output ('' when it fails or takes too long)."""
    try:
        proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def parse_node_addr(text: str) -> str | None:
    """NodeAddr from `scontrol show node NAME` output."""
    m = re.search(r"\bNodeAddr=(\S+)", text)
    return m.group(1) if m and m.group(1) not in ("(null)", "") else None


def parse_kill_wait(text: str) -> float | None:
    """KillWait seconds from `scontrol show config` output."""
    m = re.search(r"^KillWait\s*=\s*(\d+)", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def parse_restarts(text: str) -> int | None:
    """Restarts from `scontrol show job ID` output (SLURM counts a requeue at once)."""
    m = re.search(r"\bRestarts=(\d+)", text)
    return int(m.group(1)) if m else None


def node_addr(node: str) -> str:
    """The address SLURM reaches `node` at (its NodeAddr), else its name."""
    return parse_node_addr(scontrol("show", "node", node)) or node


def expand_nodelist(nodelist: str) -> list[str]:
    """`n[1-2]` -> ['n1', 'n2'] (`scontrol show hostnames`)."""
    names = scontrol("show", "hostnames", nodelist).split()
    return names or [n for n in nodelist.split(",") if n]


def kill_wait_s() -> float:
    """SLURM's KillWait: the time between SIGTERM and SIGKILL on scancel or requeue."""
    return parse_kill_wait(scontrol("show", "config")) or DEFAULT_KILL_WAIT_S


def default_drain_timeout(kill_wait: float) -> float:
    """A drain that ends before SLURM's SIGKILL: KillWait less a third (at least 2 s)."""
    return max(1.0, kill_wait - max(2.0, kill_wait / 3))


@dataclass(frozen=True)
class SlurmJob:
    """What SLURM tells the batch step about its job."""

    job_id: str
    node: str  # SLURMD_NODENAME: where this runs (the batch step: the first node)
    nodes: tuple[str, ...]
    submit_dir: Path
    restart_count: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SlurmJob:
        """The job from SLURM's environment variables (LaunchError outside a SLURM job)."""
        job_id = env.get("SLURM_JOB_ID", "")
        if not job_id:
            raise LaunchError(f"SLURM_JOB_ID is not set: submit this with sbatch ({USAGE})")
        node = env.get("SLURMD_NODENAME") or socket.gethostname()
        nodes = tuple(expand_nodelist(env.get("SLURM_JOB_NODELIST") or node))
        try:
            restarts = int(env.get("SLURM_RESTART_COUNT") or 0)
        except ValueError:
            restarts = 0
        return cls(job_id, node, nodes, Path(env.get("SLURM_SUBMIT_DIR") or os.getcwd()), restarts)

