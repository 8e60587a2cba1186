"""What every part of the SLURM launcher shares: its settings (the environment
variables it reads, names it gives in SLURM, timeouts), its error and its output line."""

from __future__ import annotations

import sys

from ftrl.util.restart_policy import RestartPolicy

ENV_RUN_DIR = "FTRL_RUN_DIR"
ENV_TOKEN_FILE = "FTRL_TOKEN_FILE"
ENV_COORDINATOR_HOST = "FTRL_COORDINATOR_HOST"
ENV_COORDINATOR_LISTEN = "FTRL_COORDINATOR_LISTEN"
ENV_DRAIN_TIMEOUT = "FTRL_DRAIN_TIMEOUT"
ENV_WORKER_MAX_RESTARTS = "FTRL_WORKER_MAX_RESTARTS"
ENV_NODE_WAIT = "FTRL_NODE_WAIT"
ENV_COORDINATOR_ARGS = "FTRL_COORDINATOR_ARGS"
ENV_WORKER_ARGS = "FTRL_WORKER_ARGS"
ENV_LOG_LEVEL = "FTRL_LOG_LEVEL"

USAGE = "usage: sbatch -N K bin/ftrl.sbatch JOB.toml [ftrl train options]"
NODE_PREFIX = "slurm-"
STEP_NAME = "ftrl-workers"
WORKER_MAX_RESTARTS = 10
WORKER_RESTART_POLICY = RestartPolicy(backoff_base_s=1.0, backoff_cap_s=30.0, quick_crash_s=30.0)
WORKER_STEP_STOP_MARGIN_S = 15.0  # a normal end: the worker step's drain gets this past the timeout
SCONTROL_TIMEOUT_S = 20.0
POLL_S = 0.2


class LaunchError(Exception):
    """Bad input or setup, found before the job starts: the message, exit status 2."""


def say(message: str) -> None:
    """One line of the launcher in the job's output."""
    print(f"ftrl.sbatch: {message}", file=sys.stderr, flush=True)
