"""The batch step: the coordinator, the worker step and the follower (`ftrl train`) run
to the job's end, and what a signal from SLURM (scancel, requeue) makes of them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ftrl.launch.slurm.allocation import SlurmJob, parse_restarts, scontrol
from ftrl.launch.slurm.base import (
    ENV_TOKEN_FILE,
    NODE_PREFIX,
    POLL_S,
    SCONTROL_TIMEOUT_S,
    STEP_NAME,
    WORKER_RESTART_POLICY,
    WORKER_STEP_STOP_MARGIN_S,
    LaunchError,
    say,
)
from ftrl.launch.slurm.plan import BatchPlan, plan_batch, prepare_run_dir
from ftrl.launch.slurm.processes import (
    child_env,
    end_process,
    log_tail,
    start_process,
    wait_or_kill,
)

COORDINATOR_START_S = 60.0
COORDINATOR_MAX_RESTARTS = 5
FOLLOWER_GRACE_S = 1.0  # scancel: how long the follower may outlive the drained workers


def newest_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint file in OUTPUT/checkpoints, if any."""
    with contextlib.suppress(OSError):
        found = sorted((output_dir / "checkpoints").glob("checkpoint_*.ftrl"))
        return found[-1] if found else None
    return None


class BatchLauncher:
    """The batch step: coordinator, worker step, follower; see `ftrl.launch.slurm`'s docstring."""

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
        """SIGTERM, SIGINT and SIGHUP are noted (`self.signum`), the steps decide."""
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
        self.coordinator = start_process(p.coordinator_argv(self.python, self.port), self.env, log)
        deadline = time.monotonic() + COORDINATOR_START_S
        while True:
            with contextlib.suppress(OSError, ValueError):
                port = int(p.port_file.read_text().strip())
                if port > 0:
                    break
            if self.coordinator.poll() is not None:
                raise RuntimeError(f"the coordinator exited with status {self.coordinator.returncode}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the coordinator did not listen within {COORDINATOR_START_S:g}s:\n{log_tail(log)}")
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
        """A client of the coordinator (made once; bounded calls)."""
        if self._client is None:
            from ftrl.client.client import Client
            from ftrl.wire.security import Security

            self._client = Client(self.address, security=Security.from_options(token_file=str(self.plan.token_file)),
                                  timeout=2.0)  # bounded: a stop on scancel must fit in KillWait
        return self._client

    def start_workers(self) -> None:
        """Start the worker step (`srun`: one supervised worker per node)."""
        p = self.plan
        self.workers = start_process(p.worker_step_argv(self.python, self.address), self.env)
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
        """Start the follower, `ftrl train` (with `--resume` on a requeue)."""
        p = self.plan
        argv = p.train_argv(self.python, self.address)
        if p.resume:
            say(f"restart {p.slurm.restart_count} of SLURM job {p.slurm.job_id}: resuming job {p.job_name}")
        self.follower = start_process(argv, self.env)

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
                end_process(self.follower, signal.SIGINT, 10.0)  # SIGTERM is blocked in it
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
            end_process(self.follower, signal.SIGKILL, 1.0)
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
        end_process(self.follower, signal.SIGKILL, 0.5)
        end_process(self.coordinator, signal.SIGINT, max(0.1, deadline + margin / 2 - time.monotonic()))
        end_process(self.workers, signal.SIGKILL, 0.5)
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
        end_process(self.follower, signal.SIGINT, 10.0)  # SIGTERM is blocked in it
        if self.workers is not None and self.workers.poll() is None:
            if self.signal_worker_step(signal.SIGTERM):
                wait_or_kill(self.workers, self.plan.drain_timeout_s + WORKER_STEP_STOP_MARGIN_S)
            else:
                end_process(self.workers, signal.SIGTERM, 10.0)
        end_process(self.coordinator, signal.SIGINT, 10.0)

    def close(self) -> None:
        """Close the client and kill whatever is left running."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        for proc in (self.follower, self.workers, self.coordinator):
            end_process(proc, signal.SIGKILL, 1.0)


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
