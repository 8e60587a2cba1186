"""The coordinator's imports: no torch, RL room or client at run time, jobs.py without the
controller, and the job table working on its narrow JobHost alone."""

from __future__ import annotations

import subprocess
import sys

from ftrl.coordinator.events import EventLog
from ftrl.coordinator.jobs import JobHost, JobStage, JobTable
from ftrl.coordinator.records import ActorRecord, ActorState
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from tests.procs import REPO


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


def test_the_coordinator_loads_no_torch_rl_or_client():
    loaded = _modules_after(
        "import importlib, pkgutil, ftrl.coordinator as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'ftrl.coordinator.'): importlib.import_module(m.name)")
    assert "ftrl.coordinator.http.server" in loaded and "ftrl.coordinator.main" in loaded
    bad = sorted(m for m in loaded if m == "torch" or m.startswith(("torch.", "ftrl.rl", "ftrl.client")))
    assert not bad, bad


def test_jobs_does_not_import_the_controller():
    loaded = _modules_after("import ftrl.coordinator.jobs")
    assert "ftrl.coordinator.controller" not in loaded


def test_the_job_table_runs_on_its_host_alone(tmp_path):
    actors: dict[str, ActorRecord] = {}
    killed: list[tuple[str, str]] = []

    def get_or_create(spec: pb.ActorSpec) -> ActorRecord:
        return actors.setdefault(spec.name, ActorRecord(spec=spec))

    def kill(name: str, reason: str) -> ActorRecord:
        killed.append((name, reason))
        actors[name].set_state(ActorState.DEAD)
        return actors[name]

    events = EventLog()
    table = JobTable(JobHost(actors=actors, events=events, get_or_create_actor=get_or_create,
                             kill_actor=kill, unhealthy_timeout_s=lambda: 30.0))
    config = codec.encode({"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 1})
    job = table.submit(pb.SubmitJobRequest(job_id="j", config=config, output_dir=str(tmp_path / "j")))
    assert list(actors) == ["j/algorithm"] and job.stage == JobStage.PENDING
    table.stop("j")
    assert job.stage == JobStage.STOPPED and killed == [("j/algorithm", "job stopped")]
    assert [e.message for e in events.recent(10)] == ["PENDING: submitted", "STOPPED: stopped before it started"]
