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
import hashlib
import json
import logging
import math
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ftrl.cli.args import non_negative_int, positive
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


def _job_name(args: argparse.Namespace, output: Path) -> str:
    """--job-name, else the output dir's name plus a hash of its absolute path: stable
    for one directory (a resume re-attaches to its runners), distinct across them."""
    explicit = getattr(args, "job_name", None)
    if explicit:
        return explicit  # checked by the parser, as `ftrl submit` checks it
    digest = hashlib.sha1(str(output.resolve()).encode()).hexdigest()[:6]
    base = re.sub(r"[^A-Za-z0-9_.\-]", "_", output.name or "job")[:60]
    return f"{base}-{digest}"


def _default_output(config: AlgorithmConfig) -> Path:
    env = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(config.environment_cfg.env))
    return Path("ftrl_results") / f"{config.algo_name.lower()}_{env}"


def output_dir(args: argparse.Namespace, config: AlgorithmConfig) -> Path:
    """--output, else ftrl_results/ALGO_ENV."""
    return Path(args.output) if getattr(args, "output", None) else _default_output(config)


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
            return _submit_and_follow(client, args, job, output, progress)

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
            return _submit_and_follow(cluster.client(), args, job, output, progress,
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
    from ftrl.rl.sampling.env_factory import probe_spaces
    from ftrl.rl.spaces import space_spec

    config = job.config
    config.validate()
    env = config.environment_cfg
    observation_space, action_space = probe_spaces(env.env, env.env_config)
    spec = space_spec(observation_space, action_space)  # ConfigError for spaces we cannot handle
    if resume_from is None:
        return None
    from ftrl.rl.driver.state import check_resume_compatible, newest_state

    found = newest_state(resume_from)
    if found is None:
        print(f"ftrl train: no valid state in {resume_from}; starting fresh", file=sys.stderr)
        return None
    check_resume_compatible(config, spec, found[0])
    return found[1]


#: Longest one long-poll of the job's record waits (Ctrl-C interrupts it at once).
FOLLOW_POLL_S = 10.0
#: How long the follower keeps trying a coordinator it cannot reach before giving up.
FOLLOW_OUTAGE_S = 300.0


def _submit_and_follow(client: Any, args: argparse.Namespace, job: JobSpec, output: Path,
                       progress: Progress, after_submit: Callable[[], None] | None = None) -> int:
    """Submit the job, (call `after_submit`,) show its progress until it ends (Ctrl-C:
    stop it with a final checkpoint; again: abort), print the summary; returns the exit
    code."""
    remote = bool(getattr(args, "coordinator", None))
    job_id = _submit_or_attach(client, args, job, output)
    if after_submit is not None:
        after_submit()
    if getattr(args, "detach", False):
        where = f" --coordinator {args.coordinator}"
        print(job_id, flush=True)
        print(f"ftrl train: submitted job {job_id}; follow it with `ftrl status {job_id}{where}`, "
              f"stop it with `ftrl stop {job_id}{where}`", file=sys.stderr)
        return 0
    shown: dict[str, Any] = {}
    try:
        info = _follow_job(client, job_id, output, progress, shown)
    except KeyboardInterrupt:
        progress.close()
        if remote:
            print(f"ftrl train: job {job_id} may still be stopping on the cluster "
                  f"(ftrl status {job_id} --coordinator {args.coordinator})", file=sys.stderr)
        raise
    progress.close(shown.get("row"))
    if info["stage"] == "FAILED":
        print(f"ftrl train: failed: {info['reason'] or 'the job failed'}", file=sys.stderr)
        return 1
    summary = _summary(info, output)
    _print_summary(summary, output)
    return 130 if info["stage"] == "STOPPED" or summary.get("stop_reason") in ("interrupted", "stopped") else 0


#: How long `--resume` retries a submit refused while the old run's actors are still stopping.
RESUBMIT_WAIT_S = 30.0
#: How long `--resume` waits for a live job of the same id that is being stopped to end.
STOPPING_WAIT_S = 120.0


def _submit_or_attach(client: Any, args: argparse.Namespace, job: JobSpec, output: Path) -> str:
    """Submit the job; returns its id. With --resume, a live job of the same id is
    followed instead (e.g. a requeued SLURM job finds it running on the restored
    coordinator); one being stopped is waited for (bounded), and one that ended but
    whose actors are still stopping is submitted again (resume=True: from the newest
    checkpoint) once they are gone (bounded)."""
    from ftrl.client.jobs import FINAL_STAGES
    from ftrl.wire.errors import AlreadyExistsError, NotFoundError

    name, resume = _job_name(args, output), getattr(args, "resume", False)
    deadline = time.monotonic() + RESUBMIT_WAIT_S
    while True:
        try:
            return client.submit(job, job_id=name, output_dir=str(output.resolve()), resume=resume)
        except AlreadyExistsError:
            if not resume:
                raise
            try:
                info = client.job_status(name)
            except NotFoundError:
                info = None
            if info is not None and info["stage"] not in FINAL_STAGES and info.get("stop_requested"):
                print(f"ftrl train: job {name} is {info['stage']} with a stop requested earlier; "
                      "resuming it once it has stopped", file=sys.stderr)
                client.stop(name, wait=True, timeout=STOPPING_WAIT_S)  # FtrlTimeoutError if it never ends
                deadline = time.monotonic() + RESUBMIT_WAIT_S
                continue
            if info is not None and info["stage"] not in FINAL_STAGES:
                print(f"ftrl train: job {name} is already {info['stage']} (iteration {info['iteration']}); "
                      "following it", file=sys.stderr)
                if info.get("output_dir") and Path(info["output_dir"]) != output.resolve():
                    print(f"ftrl train: note: job {name} writes to {info['output_dir']}, not {output}",
                          file=sys.stderr)
                return name
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _follow_job(client: Any, job_id: str, output: Path, progress: Progress, shown: dict[str, Any]) -> dict:
    """Long-poll the job's record until it reaches a final stage (returned), showing each
    new metrics row and the driver's restarts. The first Ctrl-C asks the coordinator to
    stop the job; the second raises KeyboardInterrupt. A coordinator that cannot be
    reached is retried for FOLLOW_OUTAGE_S."""
    from ftrl.client.jobs import FINAL_STAGES
    from ftrl.util.backoff import Backoff
    from ftrl.wire.errors import ActorUnavailableError, FtrlTimeoutError, NotFoundError

    seq, iteration, incarnation, stage = -1, 0, 0, ""
    stop_wanted = stop_sent = False
    outage_since: float | None = None
    backoff, delay = Backoff(base=0.5, cap=5.0), 0.0
    while True:
        try:
            if delay:
                time.sleep(delay)
                delay = 0.0
            if stop_wanted and not stop_sent:
                client.stop(job_id, reason="Ctrl-C in ftrl train")
                stop_sent = True
            info = client.wait_job(job_id, seq, FOLLOW_POLL_S)
        except KeyboardInterrupt:
            if stop_wanted:
                raise
            stop_wanted = True
            print("\nftrl train: stopping after this iteration (Ctrl-C again aborts)", file=sys.stderr)
            continue
        except (ActorUnavailableError, FtrlTimeoutError, NotFoundError) as e:
            # NotFoundError once the job was seen: a coordinator restarted without its
            # state, rebuilding the job from its driver's report (part of the outage)
            if isinstance(e, NotFoundError) and seq < 0:
                raise
            now = time.monotonic()
            if outage_since is None:
                outage_since = now
                print(f"\nftrl train: coordinator unreachable ({e}); retrying", file=sys.stderr)
            elif now - outage_since > FOLLOW_OUTAGE_S:
                raise FtrlTimeoutError(f"could not reach the coordinator for {FOLLOW_OUTAGE_S:g}s; "
                                       f"job {job_id} may still be running") from None
            delay = backoff.next_delay()
            continue
        outage_since = None
        backoff.reset()
        seq = info["seq"]
        if info["stage"] != stage:
            stage = info["stage"]
            if stage == "RECOVERING":
                print(f"\nftrl train: the driver is down ({info['reason'] or 'restarting'}); "
                      "waiting for it to restart", file=sys.stderr)
        if info["driver_incarnation"] > incarnation:
            if incarnation:
                where = f"iteration {info['iteration']}" if info["iteration"] else "the start"
                print(f"\nftrl train: driver restarted (incarnation {info['driver_incarnation']}); "
                      f"resuming from its newest state ({where})", file=sys.stderr)
            incarnation = info["driver_incarnation"]
        row = info["metrics"]
        if row and (row.get("iteration") or 0) > iteration:
            iteration = row.get("iteration") or 0
            shown["row"] = row
            progress(row)
        if stage in FINAL_STAGES:
            return info


def _summary(info: dict[str, Any], output: Path) -> dict[str, Any]:
    """How the job ended: from its record, or from OUTPUT/result.json when that is this run's."""
    summary = {
        "iteration": info["iteration"],
        "env_steps_sampled": info["env_steps_sampled"],
        "episode_return_mean": info["metrics"].get("episode_return_mean"),
        "stop_reason": "stopped" if info["stage"] == "STOPPED" else (info["reason"] or "a stop criterion"),
    }
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads((output / "result.json").read_text())
        if isinstance(saved, dict) and saved.get("iteration") == info["iteration"]:
            summary.update({k: saved[k] for k in summary if saved.get(k) is not None})
    return summary


def _print_summary(summary: dict[str, Any], output: Path) -> None:
    reason = summary.get("stop_reason")
    ret = summary.get("episode_return_mean")
    why = {"stopped": "stopped on request", "interrupted": "aborted"}.get(reason, f"stopped by {reason}")
    print(
        f"ftrl train: {why} at iteration {summary.get('iteration')}, "
        f"{summary.get('env_steps_sampled', 0):,} env steps, return "
        f"{'-' if ret is None else f'{ret:.1f}'}; outputs in {output}",
        file=sys.stderr,
    )


def _train_here(args: argparse.Namespace, job: JobSpec, output: Path, progress: Progress,
                cluster_factory: ClusterFactory | None) -> int:
    """--in-process: the driver (the Algorithm) runs in this process."""
    config, stop = job.config, job.stop

    def train() -> int:
        summary: dict[str, Any] | None = None
        with _sigterm_as_interrupt(), _client_for(args, config, cluster_factory) as client:
            algo = config.build(client=client, output_dir=output, resume=getattr(args, "resume", False),
                                job_name=_job_name(args, output))
            if algo.restored_from is not None:
                print(f"ftrl train: resumed from {algo.restored_from} (iteration {algo.iteration})",
                      file=sys.stderr)
            try:
                summary = algo.run(stop, on_result=progress)
            finally:
                progress.close(summary.get("result") if summary else None)
                algo.stop()
        _print_summary(summary, output)
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
