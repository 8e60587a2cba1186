"""SLURM launch: a coordinator, one worker per node and one job in one allocation.

`bin/ftrl.sbatch JOB.toml [ftrl train options]` execs `python -m ftrl.launch.slurm batch
JOB.toml [options]` in the batch step, which runs on the allocation's first node:

1. checks its input (a job file, `ftrl train` options it can parse, FTRL_TOKEN_FILE
   private and non-empty): bad input is a message and exit status 2 before anything starts;
2. makes the run dir on the shared filesystem (FTRL_RUN_DIR, default
   $SLURM_SUBMIT_DIR/ftrl-$SLURM_JOB_ID, mode 0700, umask 077) and, unless
   FTRL_TOKEN_FILE names one, a random token in RUN/token (0600). The token only ever
   travels as `--token-file` (never on a command line, never in this launcher's
   children's environment);
3. starts `ftrl coordinator --host 0.0.0.0 --port 0 --port-file ... --state-dir
   RUN/state-JOBID` (logs in RUN/logs/) and writes RUN/cluster.env (FTRL_COORDINATOR,
   FTRL_TOKEN_FILE: `set -a; . RUN/cluster.env; ftrl status` works from any node);
   workers dial the first node's `NodeAddr` (`scontrol show node`), not its name;
4. starts the worker step `srun -N NNODES --ntasks-per-node=1 python -m
   ftrl.launch.slurm worker ...` and waits (bounded) until every node's worker joined;
5. runs the follower `ftrl train --coordinator ADDR --config JOB.toml --output RUN/output
   --job-name slurm-JOBID [options] [--resume]`; its exit status is the job's.

The worker step (`worker`, one task per node) runs `ftrl worker --node-id slurm-NODE
--address NODEADDR --slots $SLURM_CPUS_ON_NODE --log-dir RUN/logs/slurm-NODE`
and starts it again when it dies (like systemd's Restart=always, with the restart
policy's backoff, at most `--max-restarts` times); a worker that exits 0 (drained) or
that got a signal is not restarted.

A requeue (`--requeue`: node failure, `scontrol requeue`) runs the batch script again
with the same SLURM_JOB_ID and SLURM_RESTART_COUNT >= 1: the same run dir, the
coordinator restores its state dir (a RUNNING job's driver restarts from its newest
checkpoint), and the follower gets `--resume`: it follows the job if it is still live,
else submits it again resuming from the newest checkpoint in RUN/output.

Signals, as measured with SLURM 22.05 and proctrack/linuxproc: `scancel` and
`scontrol requeue` send SIGCONT+SIGTERM to every process of every step at once (the
plugin walks the process tree: `setsid` or another process group changes nothing), then
SIGKILL after KillWait; a process whose parent exited is no longer in the tree and is
left running, so the batch script `exec`s this launcher, which outlives its children.
SIGTERM to `srun` alone cancels its step at once (SIGKILL), so at a normal end the
launcher drains the worker step with `scancel --signal=TERM JOB.STEP` instead.
The coordinator and the follower (`ftrl train`) run with SIGTERM blocked, so the
launcher decides what happens on the job's SIGTERM. It asks `scontrol show job` whether
SLURM is requeueing the job (its Restarts count is already past SLURM_RESTART_COUNT):
- scancel (or the time limit): the launcher asks the coordinator to stop the job after
  its current iteration with a checkpoint and sends the follower SIGINT (its first
  Ctrl-C, which asks the same);
- requeue: the job is left RUNNING (a stop request would be kept in the state dir and
  end the next run); the follower is killed.
Either way each worker drains (`--drain-timeout`, KillWait less a third) and the
driver's actor, which gets the SIGTERM itself, checkpoints in `__ftrl_drain__` after the
current iteration; env runners have no drain hook and stop at once, so the iteration in
progress only ends if it was past sampling: otherwise the newest checkpoint is the
periodic one. The launcher stops the coordinator (SIGINT) once the follower and the
worker step ended, or one second before KillWait runs out. Checkpoints are written
atomically, so a SIGKILL during one leaves the one before.

Settings (environment of `sbatch`, exported to the job by default): FTRL_RUN_DIR,
FTRL_TOKEN_FILE, FTRL_COORDINATOR_HOST (what workers dial; default the first node's
NodeAddr), FTRL_COORDINATOR_LISTEN (default 0.0.0.0), FTRL_DRAIN_TIMEOUT (seconds),
FTRL_WORKER_MAX_RESTARTS, FTRL_NODE_WAIT (seconds to wait for the workers to join),
FTRL_COORDINATOR_ARGS / FTRL_WORKER_ARGS (extra arguments, shell words), FTRL_LOG_LEVEL.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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
DEFAULT_KILL_WAIT_S = 30.0  # SLURM's default KillWait, if `scontrol show config` says nothing
COORDINATOR_START_S = 60.0
NODE_WAIT_S = 120.0
WORKER_MAX_RESTARTS = 10
WORKER_RESTART_POLICY = RestartPolicy(backoff_base_s=1.0, backoff_cap_s=30.0, quick_crash_s=30.0)
COORDINATOR_MAX_RESTARTS = 5
FOLLOWER_GRACE_S = 1.0  # scancel: how long the follower may outlive the drained workers
WORKER_STEP_STOP_MARGIN_S = 15.0  # a normal end: the worker step's drain gets this past the timeout
SCONTROL_TIMEOUT_S = 20.0
POLL_S = 0.2
#: `ftrl train` options the launcher sets itself.
RESERVED_TRAIN_OPTIONS = ("--coordinator", "--detach", "--in-process", "--token-file")

# Run as `python -c _BLOCK_SIGTERM PYTHON -m ftrl coordinator|train ...`: the coordinator
# and the follower start with SIGTERM blocked (the mask survives exec; Python never
# unblocks it), so the job's SIGTERM stays pending and the launcher decides what they do
# (SIGINT: the coordinator stops; the follower stops the job, as on Ctrl-C).
_BLOCK_SIGTERM = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
                  "os.execv(sys.argv[1], sys.argv[1:])")


class LaunchError(Exception):
    """Bad input or setup, found before the job starts: the message, exit status 2."""


def say(message: str) -> None:
    """One line of the launcher in the job's output."""
    print(f"ftrl.sbatch: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- SLURM facts


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


# ---------------------------------------------------------------- input and plan


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
    from ftrl.rl.train_cli import build_job
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
        return self.run_dir / "logs"

    @property
    def port_file(self) -> Path:
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


def newest_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint file in OUTPUT/checkpoints, if any."""
    with contextlib.suppress(OSError):
        found = sorted((output_dir / "checkpoints").glob("checkpoint_*.ftrl"))
        return found[-1] if found else None
    return None


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of the launched processes: no token in it (only --token-file)."""
    out = {k: v for k, v in env.items() if k not in ("FTRL_TOKEN", ENV_TOKEN_FILE)}
    out["PYTHONUNBUFFERED"] = "1"
    return out


# ---------------------------------------------------------------- processes


def _open_log(path: Path) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab")  # owned by the caller, closed once the child has it


def _start(argv: list[str], env: Mapping[str, str], log: Path | None = None) -> subprocess.Popen:
    """Start `argv` (output appended to `log`, else to this process's)."""
    if log is None:
        return subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL)
    with _open_log(log) as out:
        return subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=out)


def _end(proc: subprocess.Popen | None, sig: int, timeout: float) -> None:
    """Send `sig` to `proc`, wait up to `timeout`, then SIGKILL it (and reap it)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(max(0.0, timeout))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5.0)


def _wait_or_kill(proc: subprocess.Popen | None, timeout: float) -> None:
    """Wait up to `timeout` for `proc` to exit by itself, then SIGKILL it."""
    if proc is None:
        return
    try:
        proc.wait(max(0.0, timeout))
    except subprocess.TimeoutExpired:
        _end(proc, signal.SIGKILL, 5.0)


def _tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


class BatchLauncher:
    """The batch step: coordinator, worker step, follower; see the module docstring."""

    def __init__(self, plan: BatchPlan, env: Mapping[str, str], python: str = sys.executable):
        self.plan = plan
        self.env = child_env(env)
        self.python = python
        self.coordinator: subprocess.Popen | None = None
        self.workers: subprocess.Popen | None = None
        self.follower: subprocess.Popen | None = None
        self.port = 0
        self.address = ""
        self.signum = 0
        self.signalled_at = 0.0
        self._client: Any = None
        self._coordinator_restarts = 0

    # -------------------------------------------------------------- signals

    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self.signum:
            self.signum, self.signalled_at = signum, time.monotonic()

    def install_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # a signal handler runs in between; callers check self.signum

    # -------------------------------------------------------------- steps

    def start_coordinator(self) -> None:
        """Start the coordinator (on `self.port`, 0 the first time) and wait for its port."""
        p = self.plan
        with contextlib.suppress(FileNotFoundError):
            p.port_file.unlink()
        log = p.log_dir / "coordinator.log"
        self.coordinator = _start(p.coordinator_argv(self.python, self.port), self.env, log)
        deadline = time.monotonic() + COORDINATOR_START_S
        while True:
            with contextlib.suppress(OSError, ValueError):
                port = int(p.port_file.read_text().strip())
                if port > 0:
                    break
            if self.coordinator.poll() is not None:
                raise RuntimeError(f"the coordinator exited with status {self.coordinator.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the coordinator did not listen within {COORDINATOR_START_S:g}s:\n{_tail(log)}")
            if self.signum:
                raise RuntimeError(f"got signal {self.signum} while the coordinator started")
            self._sleep(0.05)
        self.port = port
        self.address = f"{p.dial_host}:{port}"
        env_text = f"FTRL_COORDINATOR={self.address}\n{ENV_TOKEN_FILE}={p.token_file}\n"
        from ftrl.util.files import atomic_write_bytes

        atomic_write_bytes(p.run_dir / "cluster.env", env_text.encode(), mode=0o600)
        say(f"coordinator pid {self.coordinator.pid} at {self.address} (state {p.state_dir}, "
            f"log {log}); `set -a; . {p.run_dir / 'cluster.env'}; ftrl status` shows the cluster")

    def client(self) -> Any:
        if self._client is None:
            from ftrl.client.client import Client
            from ftrl.wire.security import Security

            self._client = Client(self.address, security=Security.from_options(token_file=str(self.plan.token_file)),
                                  timeout=2.0)  # bounded: a stop on scancel must fit in KillWait
        return self._client

    def start_workers(self) -> None:
        p = self.plan
        self.workers = _start(p.worker_step_argv(self.python, self.address), self.env)
        say(f"worker step on {','.join(p.slurm.nodes)} (logs in {p.log_dir}, drain timeout "
            f"{p.drain_timeout_s:g}s, SLURM KillWait {p.kill_wait_s:g}s)")

    def wait_nodes(self) -> bool:
        """Wait (bounded) until every node's worker joined; False if none did."""
        want = {f"{NODE_PREFIX}{n}" for n in self.plan.slurm.nodes}
        deadline = time.monotonic() + self.plan.node_wait_s
        alive: set[str] = set()
        while not self.signum:
            with contextlib.suppress(Exception):
                alive = {n["node_id"] for n in self.client().nodes() if n["state"] == "ALIVE"} & want
            if alive == want:
                say(f"all {len(want)} workers joined")
                return True
            if self.workers is not None and self.workers.poll() is not None:
                say(f"the worker step ended (status {self.workers.returncode}) before the workers joined")
                return False
            if time.monotonic() > deadline:
                break
            self._sleep(0.5)
        missing = sorted(want - alive)
        if alive:
            say(f"going on without {', '.join(missing)}: not joined within {self.plan.node_wait_s:g}s")
        return bool(alive)

    def start_follower(self) -> None:
        p = self.plan
        argv = p.train_argv(self.python, self.address)
        if p.resume:
            say(f"restart {p.slurm.restart_count} of SLURM job {p.slurm.job_id}: resuming job {p.job_name}")
        self.follower = _start(argv, self.env)

    # -------------------------------------------------------------- run

    def run(self) -> int:
        """Run the job to its end; returns the batch step's exit status."""
        self.install_signals()
        try:
            self.start_coordinator()
            self.start_workers()
            if not self.wait_nodes():
                if self.signum:
                    return self.shutdown_after_signal()
                say("no worker joined the coordinator; see the logs in " + str(self.plan.log_dir))
                self.shutdown()
                return 1
            self.start_follower()
            return self.watch()
        except (RuntimeError, OSError) as e:
            say(f"error: {e}")
            if self.signum:
                return self.shutdown_after_signal()
            self.shutdown()
            return 1
        finally:
            self.close()

    def watch(self) -> int:
        """Wait for the follower's end, a signal, the worker step's end or a coordinator crash."""
        assert self.follower is not None and self.workers is not None and self.coordinator is not None
        while True:
            if self.signum:
                return self.shutdown_after_signal()
            code = self.follower.poll()
            if code is not None:
                say(f"ftrl train exited with status {code}")
                self.shutdown()
                return code
            if self.workers.poll() is not None:
                say(f"every worker is gone (worker step status {self.workers.returncode}); stopping the job")
                _end(self.follower, signal.SIGINT, 10.0)  # SIGTERM is blocked in it
                self.shutdown()
                return 1
            if self.coordinator.poll() is not None:
                self.restart_coordinator()
            self._sleep(POLL_S)

    def restart_coordinator(self) -> None:
        """A coordinator that died is started again on its port (workers reconnect)."""
        code = self.coordinator.returncode if self.coordinator else None
        self._coordinator_restarts += 1
        if self._coordinator_restarts > COORDINATOR_MAX_RESTARTS:
            raise RuntimeError(f"the coordinator died {self._coordinator_restarts} times (last status {code})")
        delay = WORKER_RESTART_POLICY.delay(self._coordinator_restarts)
        say(f"the coordinator exited with status {code}; starting it again on port {self.port} in {delay:.0f}s")
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not self.signum:
            self._sleep(POLL_S)
        self.start_coordinator()

    def stop_job(self, reason: str) -> None:
        """Ask the coordinator to stop the job after its current iteration (bounded, best effort)."""
        if not self.address:
            return
        try:
            self.client().stop(self.plan.job_name, reason=reason)
        except Exception as e:  # not submitted yet, ended, or the coordinator is gone
            say(f"could not ask the coordinator to stop job {self.plan.job_name}: {e}")

    def requeued(self) -> bool:
        """Whether SLURM is requeueing this job (its Restarts count is already past ours)
        rather than ending it."""
        restarts = parse_restarts(scontrol("show", "job", self.plan.slurm.job_id, timeout=2.0))
        return restarts is not None and restarts > self.plan.slurm.restart_count

    def shutdown_after_signal(self) -> int:
        """scancel / requeue (SIGTERM to every process, SIGKILL after KillWait): on scancel
        the job is stopped with a checkpoint while the coordinator is up; on a requeue it
        is left RUNNING (the driver drains with a checkpoint) for the next run to resume.
        The workers drain; then the coordinator stops, before SLURM's SIGKILL."""
        p = self.plan
        margin = min(1.0, p.kill_wait_s / 5)
        deadline = self.signalled_at + p.kill_wait_s - margin
        name = signal.Signals(self.signum).name
        requeued = self.requeued()
        if requeued:
            say(f"got {name}: SLURM requeues the job; job {p.job_name} is left for the next run, "
                f"which resumes it (SIGKILL in {p.kill_wait_s:g}s)")
            _end(self.follower, signal.SIGKILL, 1.0)
        else:
            say(f"got {name}: stopping job {p.job_name} with a checkpoint (SIGKILL in {p.kill_wait_s:g}s)")
            if self.follower is not None and self.follower.poll() is None:
                self.follower.send_signal(signal.SIGINT)  # its first Ctrl-C: stop the job
                self.stop_job(f"SLURM job {p.slurm.job_id} cancelled ({name})")
        if self.workers is not None and self.signum != signal.SIGTERM:
            self.signal_worker_step(signal.SIGTERM)  # SLURM's SIGTERM reaches every step; others do not
        workers_gone_at = None
        while time.monotonic() < deadline:
            procs = [x for x in (self.follower, self.workers) if x is not None and x.poll() is None]
            if not procs:
                break
            if self.workers is None or self.workers.poll() is not None:
                # no worker left: the job cannot move on; the follower gets a moment to see its end
                workers_gone_at = workers_gone_at or time.monotonic()
                if time.monotonic() - workers_gone_at > FOLLOWER_GRACE_S:
                    break
            self._sleep(POLL_S)
        left = [name for name, x in (("ftrl train", self.follower), ("worker step", self.workers))
                if x is not None and x.poll() is None]
        say("follower and workers ended after "
            f"{time.monotonic() - self.signalled_at:.1f}s" if not left else
            f"{' and '.join(left)} still running {time.monotonic() - self.signalled_at:.1f}s after the signal")
        _end(self.follower, signal.SIGKILL, 0.5)
        _end(self.coordinator, signal.SIGINT, max(0.1, deadline + margin / 2 - time.monotonic()))
        _end(self.workers, signal.SIGKILL, 0.5)
        newest = newest_checkpoint(p.output_dir)
        say(f"newest checkpoint: {newest or 'none'}" + ("" if not newest or requeued else
            f"; to continue it in a new job: FTRL_RUN_DIR={p.run_dir} sbatch ... {p.job_file} --resume"))
        return 128 + self.signum

    def signal_worker_step(self, sig: int) -> bool:
        """Signal every process of the worker step (as SLURM does), not `srun` (a SIGTERM
        to srun cancels its step at once). False if the step was not found."""
        out = ""
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            out = subprocess.run(["squeue", "--steps", "--noheader", "--format=%i %j", "--jobs",
                                  self.plan.slurm.job_id], capture_output=True, text=True,
                                 timeout=SCONTROL_TIMEOUT_S).stdout
        steps = [line.split()[0] for line in out.splitlines() if line.split()[1:] == [STEP_NAME]]
        if not steps:
            return False
        name = signal.Signals(sig).name.removeprefix("SIG")
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["scancel", f"--signal={name}", *steps], capture_output=True,
                           timeout=SCONTROL_TIMEOUT_S)
        return True

    def shutdown(self) -> None:
        """A normal end: the workers drain and exit, then the coordinator stops."""
        _end(self.follower, signal.SIGINT, 10.0)  # SIGTERM is blocked in it
        if self.workers is not None and self.workers.poll() is None:
            if self.signal_worker_step(signal.SIGTERM):
                _wait_or_kill(self.workers, self.plan.drain_timeout_s + WORKER_STEP_STOP_MARGIN_S)
            else:
                _end(self.workers, signal.SIGTERM, 10.0)
        _end(self.coordinator, signal.SIGINT, 10.0)

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        for proc in (self.follower, self.workers, self.coordinator):
            _end(proc, signal.SIGKILL, 1.0)


def run_batch(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """`python -m ftrl.launch.slurm batch JOB.toml [train options]`: the batch step."""
    env = os.environ if env is None else env
    try:
        plan = plan_batch(argv, env, SlurmJob.from_env(env))
        prepare_run_dir(plan)
    except LaunchError as e:
        say(f"error: {e}")
        return 2
    say(f"SLURM job {plan.slurm.job_id} (restart {plan.slurm.restart_count}) on {','.join(plan.slurm.nodes)}: "
        f"job {plan.job_name} from {plan.job_file}, run dir {plan.run_dir}, outputs in {plan.output_dir}")
    return BatchLauncher(plan, env).run()


# ---------------------------------------------------------------- worker step


@dataclass
class WorkerSupervisor:
    """One node's worker, started again when it dies (bounded); see the module docstring."""

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
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        streak = 0
        while True:
            started = time.monotonic()
            proc = _start(self.argv, self.env, self.log)
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
                _wait_or_kill(proc, self.drain_timeout_s + WORKER_STEP_STOP_MARGIN_S)
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("batch", "worker"):
        say(f"error: expected `batch JOB.toml [train options]` or `worker ...`; {USAGE}")
        return 2
    return run_batch(argv[1:]) if argv[0] == "batch" else run_worker(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
