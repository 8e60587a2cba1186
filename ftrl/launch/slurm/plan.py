"""The batch step's plan: its input checked (job file, `ftrl train` options, token file,
settings), the paths and the command lines of what it starts, and the run dir made."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ftrl.launch.slurm.allocation import SlurmJob, default_drain_timeout, kill_wait_s, node_addr
from ftrl.launch.slurm.base import (
    ENV_COORDINATOR_ARGS,
    ENV_COORDINATOR_HOST,
    ENV_COORDINATOR_LISTEN,
    ENV_DRAIN_TIMEOUT,
    ENV_LOG_LEVEL,
    ENV_NODE_WAIT,
    ENV_RUN_DIR,
    ENV_TOKEN_FILE,
    ENV_WORKER_ARGS,
    ENV_WORKER_MAX_RESTARTS,
    NODE_PREFIX,
    STEP_NAME,
    USAGE,
    WORKER_MAX_RESTARTS,
    LaunchError,
)

NODE_WAIT_S = 120.0
#: `ftrl train` options the launcher sets itself.
RESERVED_TRAIN_OPTIONS = ("--coordinator", "--detach", "--in-process", "--token-file")

# Run as `python -c _BLOCK_SIGTERM PYTHON -m ftrl coordinator|train ...`: the coordinator
# and the follower start with SIGTERM blocked (the mask survives exec; Python never
# unblocks it), so the job's SIGTERM stays pending and the launcher decides what they do
# (SIGINT: the coordinator stops; the follower stops the job, as on Ctrl-C).
_BLOCK_SIGTERM = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
                  "os.execv(sys.argv[1], sys.argv[1:])")


def check_token_file(path: Path, what: str = ENV_TOKEN_FILE) -> None:
    """A token file must exist, be a regular file readable by its owner alone, and not
    be empty (LaunchError says which rule it breaks)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise LaunchError(f"{what}={path} does not exist") from None
    except OSError as e:
        raise LaunchError(f"{what}={path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise LaunchError(f"{what}={path} is not a regular file")
    if st.st_mode & 0o077:
        raise LaunchError(f"{what}={path} can be read by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                          f"the cluster token must be private: chmod 600 {path}")
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise LaunchError(f"cannot read {what}={path}: {getattr(e, 'strerror', None) or e}") from None
    if not text:
        raise LaunchError(f"{what}={path} is empty")


def parse_train_options(job_file: Path, options: Sequence[str]) -> argparse.Namespace:
    """The `ftrl train` options as `ftrl train` parses them (argparse prints its error)."""
    for opt in options:
        name = opt.split("=", 1)[0]
        if name in RESERVED_TRAIN_OPTIONS:
            raise LaunchError(f"{name} is set by the launcher; leave it out of the train options")
    from ftrl.cli import build_parser
    from ftrl.config.jobs import build_job
    from ftrl.wire.errors import ConfigError

    try:
        args = build_parser().parse_args(["train", "--config", str(job_file), *options])
    except SystemExit:
        raise LaunchError(f"bad ftrl train options {' '.join(options)!r} (see above); {USAGE}") from None
    try:
        build_job(args)  # the job file and options make a valid config
    except ConfigError as e:
        raise LaunchError(f"config error in {job_file}: {e}") from None
    return args


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise LaunchError(f"{name}={text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise LaunchError(f"{name}={text!r} must be > 0")
    return value


def _env_words(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(env.get(name, "")))
    except ValueError as e:
        raise LaunchError(f"{name}: {e}") from None


@dataclass(frozen=True)
class BatchPlan:
    """Everything the batch step decided before starting anything."""

    slurm: SlurmJob
    job_file: Path
    train_options: tuple[str, ...]
    run_dir: Path
    token_file: Path
    token_given: bool  # FTRL_TOKEN_FILE (checked) rather than RUN/token (made here)
    job_name: str
    output_dir: Path
    resume: bool
    listen_host: str
    dial_host: str
    kill_wait_s: float
    drain_timeout_s: float
    node_wait_s: float
    max_restarts: int
    coordinator_args: tuple[str, ...] = ()
    worker_args: tuple[str, ...] = ()
    log_level: str = "INFO"

    @property
    def state_dir(self) -> Path:
        """The coordinator's state: one per SLURM job (kept across its requeues), so a
        run dir given again to a new job never brings back the old job's records."""
        return self.run_dir / f"state-{self.slurm.job_id}"

    @property
    def log_dir(self) -> Path:
        """RUN/logs: the coordinator's, the workers' and the actors' logs."""
        return self.run_dir / "logs"

    @property
    def port_file(self) -> Path:
        """Where the coordinator writes the port it listens on."""
        return self.run_dir / f"coordinator-{self.slurm.job_id}.port"

    def coordinator_argv(self, python: str, port: int) -> list[str]:
        """`ftrl coordinator`, SIGTERM blocked (see _BLOCK_SIGTERM)."""
        return [python, "-c", _BLOCK_SIGTERM, python, "-m", "ftrl", "--log-level", self.log_level,
                "coordinator", "--host", self.listen_host, "--port", str(port),
                "--port-file", str(self.port_file), "--state-dir", str(self.state_dir),
                "--token-file", str(self.token_file), *self.coordinator_args]

    def worker_step_argv(self, python: str, coordinator: str) -> list[str]:
        """The worker step: one `ftrl.launch.slurm worker` task on every node."""
        return ["srun", f"--job-name={STEP_NAME}", f"--nodes={len(self.slurm.nodes)}",
                "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--wait=0",
                python, "-m", "ftrl.launch.slurm", "worker", "--coordinator", coordinator,
                "--run-dir", str(self.run_dir), "--token-file", str(self.token_file),
                "--drain-timeout", f"{self.drain_timeout_s:g}", "--max-restarts", str(self.max_restarts),
                "--log-level", self.log_level, "--", *self.worker_args]

    def train_argv(self, python: str, coordinator: str) -> list[str]:
        """The follower: `ftrl train` submitting (or, resuming, re-attaching to) the job,
        SIGTERM blocked (see _BLOCK_SIGTERM)."""
        argv = [python, "-c", _BLOCK_SIGTERM, python, "-m", "ftrl", "--log-level", "WARNING", "train",
                "--config", str(self.job_file),
                "--coordinator", coordinator, "--token-file", str(self.token_file),
                "--output", str(self.output_dir), "--job-name", self.job_name, *self.train_options]
        if self.resume and "--resume" not in self.train_options:
            argv.append("--resume")
        return argv


def plan_batch(argv: Sequence[str], env: Mapping[str, str], slurm: SlurmJob,
               kill_wait: float | None = None, dial_host: str | None = None) -> BatchPlan:
    """Check the batch step's input and decide paths and arguments (LaunchError: bad input).
    `kill_wait` and `dial_host` default to what `scontrol` says."""
    if not argv or argv[0].startswith("-"):
        raise LaunchError(f"no job file given; {USAGE}")
    job_file = Path(argv[0])
    if not job_file.is_absolute():
        job_file = slurm.submit_dir / job_file
    if not job_file.is_file():
        raise LaunchError(f"job file {argv[0]} does not exist ({job_file}); {USAGE}")
    options = tuple(argv[1:])
    args = parse_train_options(job_file, options)
    run_dir = Path(env.get(ENV_RUN_DIR) or slurm.submit_dir / f"ftrl-{slurm.job_id}").absolute()
    given = env.get(ENV_TOKEN_FILE, "")
    if given:
        token_file = Path(given).absolute()
        check_token_file(token_file)
    else:
        token_file = run_dir / "token"
    if kill_wait is None:
        kill_wait = kill_wait_s()
    drain = _env_float(env, ENV_DRAIN_TIMEOUT, default_drain_timeout(kill_wait))
    try:
        max_restarts = int(env.get(ENV_WORKER_MAX_RESTARTS) or WORKER_MAX_RESTARTS)
    except ValueError:
        raise LaunchError(f"{ENV_WORKER_MAX_RESTARTS} must be a whole number") from None
    level = (env.get(ENV_LOG_LEVEL) or "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise LaunchError(f"{ENV_LOG_LEVEL}={level!r} is not DEBUG, INFO, WARNING or ERROR")
    return BatchPlan(
        slurm=slurm, job_file=job_file, train_options=options, run_dir=run_dir,
        token_file=token_file, token_given=bool(given),
        job_name=args.job_name or f"{NODE_PREFIX}{slurm.job_id}",
        output_dir=Path(args.output).absolute() if args.output else run_dir / "output",
        resume=slurm.restart_count > 0 or bool(args.resume),
        listen_host=env.get(ENV_COORDINATOR_LISTEN) or "0.0.0.0",
        dial_host=env.get(ENV_COORDINATOR_HOST) or dial_host or node_addr(slurm.node),
        kill_wait_s=kill_wait, drain_timeout_s=drain,
        node_wait_s=_env_float(env, ENV_NODE_WAIT, NODE_WAIT_S), max_restarts=max_restarts,
        coordinator_args=_env_words(env, ENV_COORDINATOR_ARGS), worker_args=_env_words(env, ENV_WORKER_ARGS),
        log_level=level,
    )


def prepare_run_dir(plan: BatchPlan) -> None:
    """The run dir (0700) and its logs dir; RUN/token (0600) made once, kept by requeues."""
    from ftrl.wire.security import write_token_file

    os.umask(0o077)
    try:
        plan.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        plan.log_dir.mkdir(exist_ok=True)
    except OSError as e:
        raise LaunchError(f"cannot make the run dir {plan.run_dir}: {e.strerror}") from None
    if not plan.token_given:
        if not plan.token_file.exists():
            write_token_file(plan.token_file)
        check_token_file(plan.token_file, what="the run's token file")
