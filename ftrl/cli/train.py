"""`ftrl train`: build a job from a job TOML and flags, submit it, follow it to its end.

    ftrl train [--config job.toml] [--algo ppo] [--env CartPole-v1] [--num-env-runners N]
               [--num-envs-per-env-runner E] [--num-learners M] [--stop-reward R]
               [--stop-timesteps T] [--stop-iters I] [--output DIR] [--resume]
               [--coordinator HOST:PORT [--detach]] [--job-name N] [--seed S]
               [--set KEY=VALUE ...]

Precedence: config defaults < the TOML file < `--set` < the named flags. The TOML uses
tables named after the builder methods (or flat RLlib keys) plus `algo` and a [stop]
table; see `ftrl.config`. Unknown keys are errors that name the nearest valid key.

Outputs under --output DIR (default ftrl_results/ALGO_ENV): metrics.jsonl (one line per
iteration), checkpoints/, driver_state.ftrl and learner_state.ftrl (the newest state,
written after every iteration), result.json. A fresh run refuses a DIR that already
holds a run's state; --resume continues from its newest valid state.

`ftrl train` is submit + follow: the job (id: --job-name, else the output dir's name and
a hash of its path) is submitted to the coordinator, which runs its driver as the actor
`JOB/algorithm` (ftrl.rl.driver.actor:AlgorithmDriver) and keeps its record; this process
long-polls that record and shows each iteration. `--coordinator` uses a running
cluster (`--detach` submits and exits); otherwise `cluster_factory(args, config)` makes
one (default: the embedded local cluster, real coordinator and worker processes on
127.0.0.1 with their state and logs in DIR/.ftrl-cluster, torn down at the end). If the
driver dies it is restarted (in place, or on another node), re-attaches to the runners
and learners that stayed up and resumes from its newest state (at most the iteration
in flight is redone); the follower goes on following. The config and the
environment are checked here, so a bad job fails before it is submitted (the embedded
cluster's processes start beside that check, to save time, and are stopped). This
process imports no torch: only the driver actor's does.
`--in-process` runs the driver in this process instead (runners still on a cluster
when num_env_runners > 0).
Ctrl-C (or SIGTERM) stops the job after the current iteration with a final checkpoint
and result.json (exit 130); a second Ctrl-C aborts at once.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ftrl.cli.args import non_negative_int, positive
from ftrl.cli.follow import job_name, print_summary, submit_and_follow
from ftrl.cli.progress import Progress
from ftrl.config import AlgorithmConfig, JobSpec
from ftrl.config.jobs import build_job
from ftrl.util.run_dir import DRIVER_STATE_FILE, has_saved_state
from ftrl.wire.errors import ConfigError, FailedPreconditionError, FtrlError

log = logging.getLogger(__name__)

ClusterFactory = Callable[[argparse.Namespace, AlgorithmConfig], Any]


def add_job_arguments(parser: argparse.ArgumentParser, config_positional: bool = False) -> None:
    """The flags that make a job (config file, config flags, stop criteria, output, name):
    shared by `ftrl train` and `ftrl submit` (which takes the job file as a positional)."""
    if config_positional:
        parser.add_argument("config", metavar="JOB.toml", help="job file (config tables + [stop])")
    else:
        parser.add_argument("--config", metavar="JOB.toml", help="job file (config tables + [stop])")
    parser.add_argument("--algo", help="algorithm (default: the job file's `algo`, else ppo)")
    parser.add_argument("--env", help="gymnasium id or import path pkg.mod:make_env")
    parser.add_argument("--num-env-runners", type=non_negative_int, metavar="N")
    parser.add_argument("--num-envs-per-env-runner", type=positive(int), metavar="E")
    parser.add_argument("--num-learners", type=non_negative_int, metavar="M")
    parser.add_argument("--stop-reward", type=float, metavar="R", help="stop when episode_return_mean >= R")
    parser.add_argument("--stop-timesteps", type=positive(int), metavar="T", help="stop after T env steps")
    parser.add_argument("--stop-iters", type=positive(int), metavar="I", help="stop after I iterations")
    parser.add_argument("--resume", action="store_true", help="continue from the newest valid state in DIR")
    parser.add_argument("--seed", type=int, metavar="S")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key (value in TOML syntax), e.g. --set lr=1e-3; "
        "`python -m ftrl.config` lists every key with its doc",
    )


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `ftrl train` flags to `parser`."""
    add_job_arguments(parser)
    parser.add_argument("--output", metavar="DIR", help="output directory (default ftrl_results/ALGO_ENV)")
    parser.add_argument("--job-name", type=job_id_arg, help="the job's id, prefix of its actor names "
                        "(default: output dir name + a hash of its path)")
    if not any(a.dest == "coordinator" for a in parser._actions):
        parser.add_argument("--coordinator", metavar="HOST:PORT", help="use a running cluster")
    parser.add_argument("--detach", action="store_true",
                        help="with --coordinator: submit the job, print its id and leave it running")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument("--in-process", action="store_true",
                        help="run the driver in this process, not as the JOB/algorithm actor")


def needs_cluster(config: AlgorithmConfig) -> bool:
    ev = config.evaluation_cfg
    return config.env_runners_cfg.num_env_runners > 0 or config.learners_cfg.num_learners > 0 or (
        ev.evaluation_interval is not None and ev.evaluation_num_env_runners > 0
    )


#: Where the embedded cluster of `ftrl train` keeps its state and logs, in the output dir.
EMBEDDED_STATE_DIR = ".ftrl-cluster"


def default_cluster_factory(args: argparse.Namespace, config: AlgorithmConfig) -> Any:
    """The embedded local cluster sized for the job's runners (the driver takes no slot),
    its state and logs in OUTPUT/.ftrl-cluster (an earlier run's jobs forgotten). Made
    without torch: only the driver actor's process loads it (see ftrl.rl.driver.embedded)."""
    from ftrl.rl.driver.embedded import embedded_cluster_for

    return embedded_cluster_for(config, driver=not getattr(args, "in_process", False), fresh=True,
                                state_dir=str(output_dir(args, config).resolve() / EMBEDDED_STATE_DIR))


@contextlib.contextmanager
def _client_for(args: argparse.Namespace, config: AlgorithmConfig, cluster_factory: ClusterFactory | None,
                always: bool = False) -> Iterator[Any]:
    if not always and not needs_cluster(config):
        yield None
        return
    coordinator = getattr(args, "coordinator", None)
    if coordinator:
        from ftrl.client.client import Client
        from ftrl.wire.security import security_from_args

        client = Client(coordinator, security=security_from_args(args))
        try:
            yield client
        finally:
            client.close()
        return
    factory = cluster_factory or default_cluster_factory
    with factory(args, config) as cluster:
        yield cluster.client()


def _default_output(config: AlgorithmConfig) -> Path:
    env = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(config.environment_cfg.env))
    return Path("ftrl_results") / f"{config.algo_name.lower()}_{env}"


def output_dir(args: argparse.Namespace, config: AlgorithmConfig) -> Path:
    """--output, else ftrl_results/ALGO_ENV."""
    return Path(args.output) if getattr(args, "output", None) else _default_output(config)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C so the run ends with a checkpoint and result.json."""
    if threading_is_main():
        previous = signal.getsignal(signal.SIGTERM)

        def handler(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)
    else:
        yield


def threading_is_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run_train(args: argparse.Namespace, cluster_factory: ClusterFactory | None = None) -> int:
    """Run `ftrl train`. Returns the exit code: 0 when a stop criterion (or none) ended
    the run, 130 after Ctrl-C or a stop on request, 2 for a bad config, 1 for a failed run.

    The job is submitted to the coordinator (--coordinator, else an embedded cluster
    made by `cluster_factory(args, config)`: a context manager whose value has
    `.client()`) and followed until it ends; `--detach` only submits it.
    """
    try:
        job = build_job(args)
    except ConfigError as e:
        print(f"ftrl train: config error: {e}", file=sys.stderr)
        return 2
    config, stop = job.config, job.stop
    output = output_dir(args, config)
    if not getattr(args, "resume", False) and has_saved_state(output):
        print(
            f"ftrl train: {output} already holds the state of a run (checkpoints, {DRIVER_STATE_FILE}); "
            "pass --resume to continue it or choose another --output",
            file=sys.stderr,
        )
        return 2
    detach = getattr(args, "detach", False)
    if detach and (getattr(args, "in_process", False) or not getattr(args, "coordinator", None)):
        print("ftrl train: --detach needs --coordinator (an embedded cluster ends with this "
              "process) and no --in-process", file=sys.stderr)
        return 2
    if stop.stop_reward is None and stop.stop_timesteps is None and stop.stop_iters is None and not detach:
        print("ftrl train: no stop criterion given; training until Ctrl-C", file=sys.stderr)
    progress = Progress(enabled=not getattr(args, "quiet", False))
    if getattr(args, "in_process", False):
        return _train_here(args, job, output, progress, cluster_factory)
    if cluster_factory is None and not getattr(args, "coordinator", None):
        return _exit_code(lambda: _train_on_embedded(args, job, output, progress))
    try:
        resume_from = check_job(job, output if getattr(args, "resume", False) else None)
    except ConfigError as e:
        print(f"ftrl train: config error: {e}", file=sys.stderr)
        return 2
    if resume_from is not None:
        print(f"ftrl train: resuming from {resume_from}", file=sys.stderr)

    def follow() -> int:
        with _sigterm_as_interrupt(), _client_for(args, config, cluster_factory, always=True) as client:
            return submit_and_follow(client, args, job, output, progress)

    return _exit_code(follow)


def _train_on_embedded(args: argparse.Namespace, job: JobSpec, output: Path, progress: Progress) -> int:
    """The default `ftrl train`: the job on an embedded cluster whose processes start
    while this one checks the job (a bad job stops them before it is submitted); the
    job is submitted once the coordinator serves (its driver waits for the worker to
    join, which is checked after) and followed; the cluster is torn down at the end."""
    new_output = not output.exists()
    with _sigterm_as_interrupt():
        cluster = default_cluster_factory(args, job.config)
        try:
            cluster.launch()
            try:
                resume_from = check_job(job, output if getattr(args, "resume", False) else None)
            except ConfigError as e:
                print(f"ftrl train: config error: {e}", file=sys.stderr)
                cluster.stop()
                if new_output:  # leave no output dir behind for a job that never ran
                    shutil.rmtree(output / EMBEDDED_STATE_DIR, ignore_errors=True)
                    with contextlib.suppress(OSError):
                        output.rmdir()
                return 2
            if resume_from is not None:
                print(f"ftrl train: resuming from {resume_from}", file=sys.stderr)
            cluster.wait_coordinator()
            return submit_and_follow(cluster.client(), args, job, output, progress,
                                      after_submit=lambda: cluster.wait_nodes(list(cluster.worker_procs)))
        finally:
            cluster.stop()


def _exit_code(run: Callable[[], int]) -> int:
    """`run()`'s exit code, or the code (and message) for how it failed."""
    try:
        return run()
    except KeyboardInterrupt:
        print("ftrl train: aborted", file=sys.stderr)
        return 130
    except ConfigError as e:
        print(f"ftrl train: config error: {e}", file=sys.stderr)
        return 2
    except FailedPreconditionError as e:  # e.g. an output dir with checkpoints and no --resume
        print(f"ftrl train: {e}", file=sys.stderr)
        return 2
    except FtrlError as e:
        print(f"ftrl train: failed: {e}", file=sys.stderr)
        return 1


def check_job(job: JobSpec, resume_from: Path | None = None) -> Path | None:
    """Fail early (before any process starts) on a config or environment that cannot
    work, or (with `resume_from`) a state this config cannot continue; corrupt state
    files are reported (and skipped) here too. Returns the state file a resume starts
    from (None: from the start)."""
    from ftrl.rl.callbacks import check_callbacks
    from ftrl.rl.models.check import check_model
    from ftrl.rl.sampling.env_factory import probe_spaces
    from ftrl.rl.spaces import space_spec

    config = job.config
    config.validate()
    check_callbacks(config)  # the user's callbacks class imports, and is an ftrl.Callbacks
    env = config.environment_cfg
    observation_space, action_space = probe_spaces(env.env, env.env_config)
    spec = space_spec(observation_space, action_space)  # ConfigError for spaces we cannot handle
    check_model(spec, config.model_config)  # a custom model's import and shapes, conv_filters
    if resume_from is None:
        return None
    from ftrl.rl.driver.state import check_resume_compatible, newest_state

    found = newest_state(resume_from)
    if found is None:
        print(f"ftrl train: no valid state in {resume_from}; starting fresh", file=sys.stderr)
        return None
    check_resume_compatible(config, spec, found[0])
    return found[1]


def _train_here(args: argparse.Namespace, job: JobSpec, output: Path, progress: Progress,
                cluster_factory: ClusterFactory | None) -> int:
    """--in-process: the driver (the Algorithm) runs in this process."""
    config, stop = job.config, job.stop

    def train() -> int:
        summary: dict[str, Any] | None = None
        with _sigterm_as_interrupt(), _client_for(args, config, cluster_factory) as client:
            algo = config.build(client=client, output_dir=output, resume=getattr(args, "resume", False),
                                job_name=job_name(args, output))
            if algo.restored_from is not None:
                print(f"ftrl train: resumed from {algo.restored_from} (iteration {algo.iteration})",
                      file=sys.stderr)
            try:
                summary = algo.run(stop, on_result=progress)
            finally:
                progress.close(summary.get("result") if summary else None)
                algo.stop()
        print_summary(summary, output)
        return 130 if summary["stop_reason"] in ("interrupted", "stopped") else 0

    return _exit_code(train)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m ftrl.cli.train`); `ftrl train` is the usual one."""
    parser = argparse.ArgumentParser(prog="ftrl train")
    add_train_arguments(parser)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_train(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


def job_id_arg(text: str) -> str:
    """argparse type of --job-name: a valid job id (as `ftrl submit` requires)."""
    from ftrl.client.jobs import check_job_id

    try:
        return check_job_id(text)
    except FtrlError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
