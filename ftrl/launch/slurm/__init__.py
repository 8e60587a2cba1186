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

Modules: base (settings, LaunchError, the output line), allocation (what SLURM says:
the job, its nodes, KillWait), plan (input checks, paths, command lines, the run dir),
processes (children started and ended), batch (the batch step), worker_step (the
supervised worker of one node).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ftrl.launch.slurm.allocation import (
    SlurmJob,
    default_drain_timeout,
    expand_nodelist,
    kill_wait_s,
    node_addr,
    parse_kill_wait,
    parse_node_addr,
    parse_restarts,
    scontrol,
)
from ftrl.launch.slurm.base import USAGE, LaunchError, say
from ftrl.launch.slurm.batch import BatchLauncher, newest_checkpoint, run_batch
from ftrl.launch.slurm.plan import (
    BatchPlan,
    check_token_file,
    parse_train_options,
    plan_batch,
    prepare_run_dir,
)
from ftrl.launch.slurm.processes import child_env
from ftrl.launch.slurm.worker_step import WorkerSupervisor, run_worker, worker_argv, worker_parser

__all__ = [
    "BatchLauncher", "BatchPlan", "LaunchError", "SlurmJob", "WorkerSupervisor", "check_token_file",
    "child_env", "default_drain_timeout", "expand_nodelist", "kill_wait_s", "main", "newest_checkpoint",
    "node_addr", "parse_kill_wait", "parse_node_addr", "parse_restarts", "parse_train_options",
    "plan_batch", "prepare_run_dir", "run_batch", "run_worker", "scontrol", "worker_argv", "worker_parser",
]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m ftrl.launch.slurm batch|worker ...`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("batch", "worker"):
        say(f"error: expected `batch JOB.toml [train options]` or `worker ...`; {USAGE}")
        return 2
    return run_batch(argv[1:]) if argv[0] == "batch" else run_worker(argv[1:])
