"""The job's driver as an actor: `"ftrl.rl.driver:AlgorithmDriver"`.

    client.create_actor("ftrl.rl.driver:AlgorithmDriver", name=f"{job}/algorithm",
                        kwargs={"job": job_spec_dict, "output_dir": "/runs/job"},
                        max_restarts=10)

The constructor returns at once; training runs on a thread of the actor. Runners are
created through the actor's own client (`get_runtime_context().client()`) under the
job's name, with `get_if_exists`, so a driver that was killed and restarted in place
re-attaches to the runners that stayed up, and resumes from the newest valid checkpoint
in `output_dir` (iteration and env steps never go backwards past it). `status()`
reports progress; `stop()` asks for a stop after the current iteration.
Outside an actor (tests), pass `client=` in-process.
"""

from __future__ import annotations

import logging
import threading
import traceback
from pathlib import Path
from typing import Any

from ftrl.config import load_job
from ftrl.rl.metrics import json_safe

log = logging.getLogger(__name__)

_FINAL_STAGES = ("FINISHED", "STOPPED", "FAILED")
# What a follower needs to show progress (Progress.format), not the whole result.
_PROGRESS_KEYS = frozenset({
    "iteration", "env_steps_sampled", "episode_return_mean", "num_env_runners",
    "num_healthy_env_runners", "num_env_runner_restarts", "num_sub_env_restarts", "time_s",
    "evaluation", "num_learners", "mesh_epoch", "weights_version",
})


class AlgorithmDriver:
    """Runs one job (config + stop criteria) to its end inside an actor process.

    Args:
        job: the job file as a dict (`algo`, config keys or tables, `[stop]`).
        output_dir: where metrics.jsonl, checkpoints/ and result.json go.
        job_name: actor-name prefix of the job's runners (default: this actor's name
            without its "/algorithm" suffix).
        client: only in-process; inside an actor the runtime's client is used.
    """

    def __init__(self, job: dict, output_dir: str, job_name: str | None = None, client: Any = None):
        from ftrl.client.context import get_runtime_context

        self.spec = load_job(data=job)  # ConfigError here fails the actor's start
        self.spec.config.validate()
        ctx = get_runtime_context()
        self.incarnation = ctx.incarnation if ctx is not None else 1
        if client is None and ctx is not None:
            client = ctx.client()
        if job_name is None:
            job_name = ctx.name.rsplit("/algorithm", 1)[0] if ctx is not None else "job"
        self.client = client
        self.job_name = job_name
        self.output_dir = Path(output_dir)
        self._stop = threading.Event()
        self._lock = threading.Condition()
        self._status: dict[str, Any] = {"stage": "STARTING", "incarnation": self.incarnation}
        self._done = threading.Event()
        self._algo: Any = None
        self._thread = threading.Thread(target=self._main, name="ftrl-driver", daemon=True)
        self._thread.start()

    def _set(self, **values: Any) -> None:
        with self._lock:
            self._status.update(json_safe(values))
            self._lock.notify_all()

    def _main(self) -> None:
        algo = None
        try:
            has_checkpoints = any((self.output_dir / "checkpoints").glob("checkpoint_*.ftrl"))
            algo = self.spec.config.build(
                client=self.client, output_dir=self.output_dir, resume=has_checkpoints, job_name=self.job_name
            )
            self._algo = algo
            self._set(
                stage="RUNNING",
                iteration=algo.iteration,
                env_steps_sampled=algo.env_steps_sampled,
                restored_from=str(algo.restored_from) if algo.restored_from else None,
            )
            summary = algo.run(self.spec.stop, on_result=self._on_result, stop_event=self._stop)
            self._set(stage="STOPPED" if summary["stop_reason"] == "stopped" else "FINISHED", summary=summary)
        except Exception as e:
            log.exception("driver of %s failed", self.job_name)
            self._set(stage="FAILED", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        finally:
            if algo is not None:
                algo.stop()
            self._done.set()

    def _on_result(self, result: dict[str, Any]) -> None:
        self._set(
            result={k: v for k, v in result.items() if k in _PROGRESS_KEYS},
            iteration=result["iteration"],
            env_steps_sampled=result["env_steps_sampled"],
            episode_return_mean=result.get("episode_return_mean"),
            num_healthy_env_runners=result.get("num_healthy_env_runners"),
            num_env_runner_restarts=result.get("num_env_runner_restarts"),
            time_s=result.get("time_s"),
        )

    def status(self) -> dict[str, Any]:
        """{"stage": STARTING|RUNNING|FINISHED|STOPPED|FAILED, "iteration",
        "env_steps_sampled", "episode_return_mean", "incarnation", "restored_from", ...}."""
        with self._lock:
            return dict(self._status)

    def wait_status(self, after_iteration: int, timeout_s: float = 10.0) -> dict[str, Any]:
        """Block until an iteration past `after_iteration` is done or the run ended
        (or `timeout_s` passed, at most 60 s); return the status. For followers such
        as `ftrl train`, instead of polling. Needs max_concurrency >= 2."""
        deadline = min(max(0.0, timeout_s), 60.0)
        with self._lock:
            self._lock.wait_for(
                lambda: (self._status.get("iteration") or 0) > after_iteration
                or self._status.get("stage") in _FINAL_STAGES,
                timeout=deadline,
            )
            return dict(self._status)

    def scale_learners(self, num_learners: int) -> dict[str, Any]:
        """Grow or shrink the job's learner group at the next step boundary."""
        algo = self._algo
        if algo is None:
            raise RuntimeError("the job is not running yet")
        algo.scale_learners(int(num_learners))
        return self.status()

    def stop(self) -> dict[str, Any]:
        """Ask for a stop after the current iteration (with a final checkpoint)."""
        self._stop.set()
        return self.status()

    def wait(self, timeout: float = 60.0) -> dict[str, Any]:
        """Block until the run ends (or `timeout`); return the status."""
        self._done.wait(timeout)
        return self.status()
