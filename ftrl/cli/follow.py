"""`ftrl train` on a coordinator: submit the job (or attach to the live one of the same id
with --resume), follow its record to its end, print how it ended."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftrl.cli.progress import Progress
from ftrl.config import JobSpec


def job_name(args: argparse.Namespace, output: Path) -> str:
    """--job-name, else the output dir's name plus a hash of its absolute path: stable
    for one directory (a resume re-attaches to its runners), distinct across them."""
    explicit = getattr(args, "job_name", None)
    if explicit:
        return explicit  # checked by the parser, as `ftrl submit` checks it
    digest = hashlib.sha1(str(output.resolve()).encode()).hexdigest()[:6]
    base = re.sub(r"[^A-Za-z0-9_.\-]", "_", output.name or "job")[:60]
    return f"{base}-{digest}"


#: Longest one long-poll of the job's record waits (Ctrl-C interrupts it at once).
FOLLOW_POLL_S = 10.0
#: How long the follower keeps trying a coordinator it cannot reach before giving up.
FOLLOW_OUTAGE_S = 300.0


def submit_and_follow(client: Any, args: argparse.Namespace, job: JobSpec, output: Path,
                       progress: Progress, after_submit: Callable[[], None] | None = None) -> int:
    """Submit the job, (call `after_submit`,) show its progress until it ends (Ctrl-C:
    stop it with a final checkpoint; again: abort), print the summary; returns the exit
    code."""
    remote = bool(getattr(args, "coordinator", None))
    job_id = submit_or_attach(client, args, job, output)
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
        info = follow_job(client, job_id, output, progress, shown)
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
    summary = job_summary(info, output)
    print_summary(summary, output)
    return 130 if info["stage"] == "STOPPED" or summary.get("stop_reason") in ("interrupted", "stopped") else 0


#: How long `--resume` retries a submit refused while the old run's actors are still stopping.
RESUBMIT_WAIT_S = 30.0
#: How long `--resume` waits for a live job of the same id that is being stopped to end.
STOPPING_WAIT_S = 120.0


def submit_or_attach(client: Any, args: argparse.Namespace, job: JobSpec, output: Path) -> str:
    """Submit the job; returns its id. With --resume, a live job of the same id is
    followed instead (e.g. a requeued SLURM job finds it running on the restored
    coordinator); one being stopped is waited for (bounded), and one that ended but
    whose actors are still stopping is submitted again (resume=True: from the newest
    checkpoint) once they are gone (bounded)."""
    from ftrl.client.jobs import FINAL_STAGES
    from ftrl.wire.errors import AlreadyExistsError, NotFoundError

    name, resume = job_name(args, output), getattr(args, "resume", False)
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


def follow_job(client: Any, job_id: str, output: Path, progress: Progress, shown: dict[str, Any]) -> dict:
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


def job_summary(info: dict[str, Any], output: Path) -> dict[str, Any]:
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


def print_summary(summary: dict[str, Any], output: Path) -> None:
    reason = summary.get("stop_reason")
    ret = summary.get("episode_return_mean")
    why = {"stopped": "stopped on request", "interrupted": "aborted"}.get(reason, f"stopped by {reason}")
    print(
        f"ftrl train: {why} at iteration {summary.get('iteration')}, "
        f"{summary.get('env_steps_sampled', 0):,} env steps, return "
        f"{'-' if ret is None else f'{ret:.1f}'}; outputs in {output}",
        file=sys.stderr,
    )
