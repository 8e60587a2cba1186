"""ftrl.launch.slurm without SLURM: input checks, the plan's arguments, the worker
supervisor's restart loop, and `ftrl train --resume` attaching to a live job."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from ftrl.launch import slurm
from ftrl.launch.slurm import BatchPlan, LaunchError, SlurmJob, WorkerSupervisor, plan_batch
from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire.errors import AlreadyExistsError

JOB = 'algo = "PPO"\n[environment]\nenv = "CartPole-v1"\n'


def _slurm_job(tmp_path: Path, restarts: int = 0) -> SlurmJob:
    return SlurmJob(job_id="42", node="n1", nodes=("n1", "n2"), submit_dir=tmp_path, restart_count=restarts)


def _plan(tmp_path: Path, *args: str, env: dict[str, str] | None = None, restarts: int = 0) -> BatchPlan:
    (tmp_path / "job.toml").write_text(JOB)
    return plan_batch(["job.toml", *args] if not args or args[0] != "-" else list(args[1:]), env or {},
                      _slurm_job(tmp_path, restarts), kill_wait=30.0, dial_host="10.0.0.1")


def test_plan_defaults(tmp_path):
    p = _plan(tmp_path, "--stop-iters", "5")
    assert p.job_file == tmp_path / "job.toml"
    assert p.run_dir == tmp_path / "ftrl-42" and p.token_file == tmp_path / "ftrl-42" / "token"
    assert (p.job_name, p.output_dir, p.resume) == ("slurm-42", tmp_path / "ftrl-42" / "output", False)
    assert p.state_dir == tmp_path / "ftrl-42" / "state-42"
    assert (p.listen_host, p.dial_host, p.drain_timeout_s) == ("0.0.0.0", "10.0.0.1", 20.0)

    c = p.coordinator_argv("py", 0)
    assert c[:2] == ["py", "-c"] and "SIG_BLOCK" in c[2]  # SIGTERM blocked, then exec
    assert c[3:] == ["py", "-m", "ftrl", "--log-level", "INFO", "coordinator", "--host", "0.0.0.0",
                     "--port", "0", "--port-file", str(p.port_file), "--state-dir", str(p.state_dir),
                     "--token-file", str(p.token_file)]
    t = p.train_argv("py", "10.0.0.1:5")
    assert t[3:] == ["py", "-m", "ftrl", "--log-level", "WARNING", "train", "--config", str(p.job_file),
                     "--coordinator", "10.0.0.1:5", "--token-file", str(p.token_file),
                     "--output", str(p.output_dir), "--job-name", "slurm-42", "--stop-iters", "5"]
    w = p.worker_step_argv("py", "10.0.0.1:5")
    assert w[:4] == ["srun", "--job-name=ftrl-workers", "--nodes=2", "--ntasks-per-node=1"]
    assert w[w.index("--drain-timeout") + 1] == "20"


def test_worker_step_arguments_make_the_node_worker(tmp_path):
    p = _plan(tmp_path, env={"FTRL_WORKER_ARGS": "--spares 0 --slots 3"})
    step = p.worker_step_argv("py", "10.0.0.1:5")
    args = slurm.worker_parser().parse_args(step[step.index("worker") + 1:])
    argv = slurm.worker_argv("py", args, "n2", "10.0.0.2", 2)
    assert argv[:6] == ["py", "-m", "ftrl", "--log-level", "INFO", "worker"]
    opts = dict(zip(argv[6::2], argv[7::2], strict=False))
    assert opts["--coordinator"] == "10.0.0.1:5" and opts["--node-id"] == "slurm-n2"
    assert opts["--address"] == "10.0.0.2" and opts["--drain-timeout"] == "20"
    assert opts["--log-dir"] == str(p.log_dir / "slurm-n2") and opts["--token-file"] == str(p.token_file)
    assert argv[-4:] == ["--spares", "0", "--slots", "3"]  # the extra arguments come last: they win


def test_plan_on_a_requeue_resumes_and_user_options_win(tmp_path):
    p = _plan(tmp_path, "--job-name", "mine", "--output", "out", restarts=1)
    assert (p.job_name, p.resume) == ("mine", True)
    assert p.output_dir == Path("out").absolute()
    argv = p.train_argv("py", "a:1")
    assert argv[-1] == "--resume" and argv[argv.index("--job-name") + 1] == "mine"


def test_plan_settings_from_the_environment(tmp_path):
    token = tmp_path / "tok"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    env = {"FTRL_RUN_DIR": str(tmp_path / "run"), "FTRL_TOKEN_FILE": str(token),
           "FTRL_COORDINATOR_HOST": "head", "FTRL_DRAIN_TIMEOUT": "7.5", "FTRL_WORKER_ARGS": "--spares 0",
           "FTRL_COORDINATOR_ARGS": "--heartbeat-timeout '9'"}
    p = _plan(tmp_path, env=env)
    assert (p.run_dir, p.token_file, p.token_given) == (tmp_path / "run", token, True)
    assert (p.dial_host, p.drain_timeout_s) == ("head", 7.5)
    assert p.worker_args == ("--spares", "0") and p.coordinator_argv("py", 0)[-2:] == ["--heartbeat-timeout", "9"]


@pytest.mark.parametrize(("args", "message"), [
    (("-",), "no job file given"),
    (("-", "--stop-iters", "3"), "no job file given"),
    (("-", "missing.toml"), "job file missing.toml does not exist"),
    (("--coordinator", "h:1"), "--coordinator is set by the launcher"),
    (("--detach",), "--detach is set by the launcher"),
    (("--no-such-flag",), "bad ftrl train options"),
    (("--set", "no_such_key=1"), "config error in .*job.toml"),
])
def test_bad_input(tmp_path, args, message):
    with pytest.raises(LaunchError, match=message):
        _plan(tmp_path, *args)


@pytest.mark.parametrize(("content", "mode", "message"), [
    (None, 0o600, "does not exist"),
    ("", 0o600, "is empty"),
    ("t\n", 0o644, r"can be read by group or others \(mode 0644\).*chmod 600"),
    ("t\n", 0o640, r"mode 0640"),
])
def test_bad_token_file(tmp_path, content, mode, message):
    token = tmp_path / "token"
    if content is not None:
        token.write_text(content)
        token.chmod(mode)
    with pytest.raises(LaunchError, match=message):
        _plan(tmp_path, env={"FTRL_TOKEN_FILE": str(token)})


def test_prepare_run_dir_makes_a_private_token_once(tmp_path):
    p = _plan(tmp_path)
    slurm.prepare_run_dir(p)
    first = p.token_file.read_text()
    assert p.token_file.stat().st_mode & 0o777 == 0o600 and p.run_dir.stat().st_mode & 0o777 == 0o700
    slurm.prepare_run_dir(p)  # a requeue keeps it
    assert p.token_file.read_text() == first


def test_child_env_has_no_token():
    env = slurm.child_env({"FTRL_TOKEN": "x", "FTRL_TOKEN_FILE": "/t", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "PYTHONUNBUFFERED": "1"}


def test_parsers():
    assert slurm.parse_node_addr("NodeName=n1 Arch=x86_64\n   NodeAddr=127.0.0.1 NodeHostName=localhost") == "127.0.0.1"
    assert slurm.parse_node_addr("nothing") is None
    assert slurm.parse_kill_wait("JobRequeue = 1\nKillWait                = 5 sec\n") == 5.0
    assert slurm.parse_restarts("   Requeue=1 Restarts=2 BatchFlag=1") == 2
    assert (slurm.default_drain_timeout(5), slurm.default_drain_timeout(30), slurm.default_drain_timeout(60)) == (3, 20, 40)


def _supervisor(tmp_path: Path, codes: list[int], max_restarts: int) -> WorkerSupervisor:
    """A supervisor of a fake worker that exits with codes[i] on its i-th start."""
    counter = tmp_path / "starts"
    counter.write_text("0")
    script = (f"import pathlib, sys; c = pathlib.Path({str(counter)!r}); n = int(c.read_text()); "
              f"c.write_text(str(n + 1)); sys.exit({codes!r}[min(n, {len(codes) - 1})])")
    return WorkerSupervisor([sys.executable, "-c", script], {}, tmp_path / "w.log", "slurm-n1",
                            max_restarts=max_restarts, policy=RestartPolicy(0.0, 0.0, 0.0))


def test_supervisor_restarts_a_dying_worker_until_it_drains(tmp_path):
    sup = _supervisor(tmp_path, [-9 % 256, 1, 0], max_restarts=5)
    assert sup.run() == 0
    assert ((tmp_path / "starts").read_text(), sup.restarts) == ("3", 2)


def test_supervisor_gives_up_after_its_restarts(tmp_path):
    sup = _supervisor(tmp_path, [1], max_restarts=2)
    assert sup.run() == 1
    assert (tmp_path / "starts").read_text() == "3"


class _FakeClient:
    """submit() refuses (job exists); job_status() says what `stages` holds, in turn."""

    def __init__(self, stages: list[str], stop_requested: bool = False):
        self.stages, self.stop_requested = stages, stop_requested
        self.submits = 0
        self.stopped = False

    def submit(self, job, job_id, output_dir, resume):
        self.submits += 1
        if self.stages:
            raise AlreadyExistsError(f"job {job_id!r} exists and is RUNNING")
        return job_id

    def job_status(self, job_id):
        return {"stage": self.stages.pop(0), "iteration": 7, "output_dir": "",
                "stop_requested": self.stop_requested and not self.stopped}

    def stop(self, job_id, wait=False, timeout=0.0):
        self.stopped = True
        self.stages = []  # ended
        return {}


def test_resume_follows_a_live_job_and_resubmits_an_ended_one(tmp_path, monkeypatch):
    from ftrl.cli import follow

    monkeypatch.setattr(follow.time, "sleep", lambda s: None)
    args = argparse.Namespace(resume=True, job_name="j")
    live = _FakeClient(["RUNNING"])
    assert follow.submit_or_attach(live, args, None, tmp_path) == "j" and live.submits == 1
    stopping = _FakeClient(["RUNNING"], stop_requested=True)  # stopped first, then submitted again
    assert follow.submit_or_attach(stopping, args, None, tmp_path) == "j"
    assert stopping.stopped and stopping.submits == 2
    with pytest.raises(AlreadyExistsError):
        follow.submit_or_attach(_FakeClient(["RUNNING"]), argparse.Namespace(resume=False, job_name="j"),
                                    None, tmp_path)
