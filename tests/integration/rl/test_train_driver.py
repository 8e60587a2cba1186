"""`ftrl train` end to end as a user runs it: the job's driver is the JOB/algorithm actor
on an embedded cluster; killing it must not lose the run, and Ctrl-C must stop cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests.cluster import REPO, running_train, wait_until

CARTPOLE_JOB = REPO / "examples" / "cartpole_ppo.toml"


def _train(out: Path, job: str, *extra: str) -> contextlib.AbstractContextManager[subprocess.Popen]:
    """`ftrl train` of CARTPOLE_JOB running (killed with its process group on leaving)."""
    argv = [sys.executable, "-m", "ftrl", "train", "--config", str(CARTPOLE_JOB), "--output", str(out),
            "--job-name", job, "--num-env-runners", "2", "--set", "rollout_fragment_length=16",
            "--set", "checkpoint_interval=10", "--seed", "3", "--quiet", *extra]
    return running_train(argv)


def _actors(job: str) -> dict[str, int]:
    """pid of every live `ftrl-actor JOB/...` process, by actor name."""
    found = {}
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith(f"ftrl-actor {job}/"):
            found[cmd.split(" ", 1)[1].strip()] = p.info["pid"]
    return found


def _iterations(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines() if line.endswith("}")]


def test_killed_driver_actor_restarts_in_place_and_the_run_goes_on(tmp_path):
    out, job = tmp_path / "run", "kd"
    with _train(out, job, "--stop-iters", "60") as proc:
        wait_until(lambda: len(list((out / "checkpoints").glob("checkpoint_*.ftrl"))) >= 2, timeout=120,
                   what="two checkpoints")
        before = _actors(job)
        assert set(before) == {f"{job}/algorithm", f"{job}/env_runner/0", f"{job}/env_runner/1"}
        last_row = _iterations(out)[-1]
        os.kill(before[f"{job}/algorithm"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert "driver restarted (incarnation 2)" in stderr
    assert "resuming from its newest state (iteration " in stderr
    iterations = _iterations(out)
    assert iterations == list(range(1, 61))  # never backwards, never repeated
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stop_iters" and result["iteration"] == 60
    # the per-iteration driver state; or a checkpoint newer than every row, when the kill
    # came between the checkpoint (written in the iteration) and that iteration's driver
    # state (written right after by the state writer): the newest state either way
    restored = Path(result["restored_from"])
    if restored.name != "driver_state.ftrl":
        assert restored.parent.name == "checkpoints", restored
        assert int(restored.stem.removeprefix("checkpoint_")) > last_row, (restored, last_row)
    # the runners stayed up through the driver's restart: no runner restarts were needed
    assert result["result"]["num_env_runner_restarts"] == 0
    # the rows count the resume (`ftrl plot` marks it there)
    from ftrl.rl.driver.metrics import MetricsLog
    from ftrl.rl.driver.run_plot import events

    rows = sorted(MetricsLog(out / "metrics.jsonl").read(), key=lambda r: r["iteration"])
    assert rows[0]["num_driver_resumes"] == 0 and rows[-1]["num_driver_resumes"] == 1
    assert len(events(rows, "num_driver_resumes")) == 1
    wait_until(lambda: not _actors(job), timeout=30, what="the job's processes to end")


def test_ctrl_c_stops_after_the_iteration_with_a_checkpoint(tmp_path):
    out, job = tmp_path / "run", "cc"
    with _train(out, job, "--stop-iters", "100000") as proc:
        wait_until(lambda: len(_iterations(out)) >= 5, timeout=120, what="five iterations")
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends: the whole foreground group
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "stopping after this iteration" in stderr and "stopped on request" in stderr
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stopped"
    last = max(_iterations(out))
    assert (out / "checkpoints" / f"checkpoint_{last:08d}.ftrl").exists()  # a final checkpoint
    wait_until(lambda: not _actors(job), timeout=30, what="the job's processes to end")
