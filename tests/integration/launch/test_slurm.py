"""`bin/ftrl.sbatch` under a real SLURM 22.05 with two logical nodes n1, n2 on this host.

`tests/slurm/start-local-slurm.sh` (LOCAL_SLURM_NODES=2, LOCAL_SLURM_CRED_EXPIRE=5: a
requeued job starts again about 6 s later; KillWait is 5 s) brings the cluster up
(installing the Debian packages if missing) or the module is skipped saying why.
One sbatch job (PPO on CartPole, 2 env runners) goes through the cases in order:
it trains with actors on both nodes; one node's worker is SIGKILLed (the worker step
starts it again, training goes on); `scontrol requeue` (the job resumes from the
restored state dir and its newest checkpoint, iterations never go backwards);
`scancel` (every process of the job gone within KillWait, the newest checkpoint
whole and at the last reported iteration or near it). Bad input (no job file, a
missing one, a token file others can read, an empty one) fails the job with a message.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from ftrl.rl.driver.checkpoint import decode_checkpoint
from tests.cluster import REPO, wait_until

pytestmark = pytest.mark.slurm

SBATCH = REPO / "bin" / "ftrl.sbatch"
START = REPO / "tests" / "slurm" / "start-local-slurm.sh"
STOP = REPO / "tests" / "slurm" / "stop-local-slurm.sh"
KILL_WAIT_S = 5  # what start-local-slurm.sh configures
CHECKPOINT_INTERVAL = 2
JOB_TOML = f"""\
algo = "PPO"
[environment]
env = "CartPole-v1"
[env_runners]
num_env_runners = 2
num_envs_per_env_runner = 4
[training]
train_batch_size = 256
minibatch_size = 128
num_epochs = 2
[checkpointing]
checkpoint_interval = {CHECKPOINT_INTERVAL}
keep_checkpoints = 3
[stop]
stop_iters = 1000000
"""


def _slurmctld_running() -> bool:
    with contextlib.suppress(OSError, ValueError):
        pid = int(Path("/run/slurmctld.pid").read_text().strip())
        return Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld"
    return False


@pytest.fixture(scope="module")
def slurm() -> Iterator[None]:
    """The local 2-node cluster (stopped at the end only if this module started it)."""
    if os.geteuid() != 0:
        pytest.skip("start-local-slurm.sh needs root")
    if not START.exists():
        pytest.skip(f"{START} is missing")
    was_up = _slurmctld_running()
    env = {**os.environ, "LOCAL_SLURM_NODES": "2", "LOCAL_SLURM_CRED_EXPIRE": "5"}
    try:
        proc = subprocess.run(["bash", str(START)], env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("start-local-slurm.sh did not finish within 300s")
    if proc.returncode != 0:
        pytest.skip(f"start-local-slurm.sh cannot work here (exit {proc.returncode}): "
                    f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    yield
    if not was_up:
        subprocess.run(["bash", str(STOP)], capture_output=True, timeout=120)


def _env(**extra: str) -> dict[str, str]:
    """sbatch's environment (exported to the job): this interpreter, the repo importable,
    no FTRL_* settings of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTRL_")}
    env.update({"FTRL_PYTHON": sys.executable, "PYTHONPATH": str(REPO), **extra})
    return env


def _job_processes(job_id: str) -> list[psutil.Process]:
    """Every process running for SLURM job `job_id` (they all inherit SLURM_JOB_ID)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("SLURM_JOB_ID") == job_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def _squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                         timeout=30).stdout.strip()
    return out


def _cancel(job_id: str) -> None:
    """scancel the job; wait (bounded) for its processes, SIGKILL what is left by pid."""
    subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    deadline = time.monotonic() + KILL_WAIT_S + 15
    while _job_processes(job_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    for proc in _job_processes(job_id):
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)


def _sbatch(tmp: Path, *args: str, env: dict[str, str] | None = None, wait: bool = False,
            nodes: int = 2) -> subprocess.CompletedProcess:
    argv = ["sbatch", "--parsable", f"-N{nodes}", *(["--wait"] if wait else []), str(SBATCH), *args]
    return subprocess.run(argv, cwd=tmp, env=env or _env(), capture_output=True, text=True,
                          timeout=120)


@dataclass
class Job:
    """One sbatch job of bin/ftrl.sbatch and its files."""

    job_id: str
    submit_dir: Path

    @property
    def run_dir(self) -> Path:
        return self.submit_dir / f"ftrl-{self.job_id}"

    @property
    def out(self) -> str:
        with contextlib.suppress(OSError):
            return (self.submit_dir / f"ftrl-{self.job_id}.out").read_text()
        return ""

    @property
    def output(self) -> Path:
        return self.run_dir / "output"

    def cluster(self) -> dict[str, str]:
        """FTRL_COORDINATOR and FTRL_TOKEN_FILE of the current run (cluster.env)."""
        text = (self.run_dir / "cluster.env").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def status(self) -> dict:
        """`ftrl status --json` against the job's coordinator."""
        env = self.cluster()
        proc = subprocess.run([sys.executable, "-m", "ftrl", "status", "--json", "--coordinator",
                               env["FTRL_COORDINATOR"], "--token-file", env["FTRL_TOKEN_FILE"]],
                              capture_output=True, text=True, timeout=60, env=_env())
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def iterations(self) -> list[int]:
        path = self.output / "metrics.jsonl"
        if not path.exists():
            return []
        return [json.loads(line)["iteration"] for line in path.read_text().splitlines() if line.strip()]

    def describe(self) -> str:
        logs = sorted(self.run_dir.glob("logs/*.log"))
        tails = "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                          for p in logs)
        return f"--- job output\n{self.out[-4000:]}\n{tails}"


def _pids_of_worker(node_id: str, run_dir: Path) -> list[int]:
    """The `ftrl worker` process (not its supervisor) of `node_id` in this run."""
    pids = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmd = proc.cmdline()
            if "worker" in cmd and "--node-id" in cmd and cmd[cmd.index("--node-id") + 1] == node_id \
                    and any(str(run_dir) in part for part in cmd):
                pids.append(proc.pid)
    return pids


@pytest.fixture(scope="module")
def job(slurm, tmp_path_factory) -> Iterator[Job]:
    """The module's one training job (scancelled at the end whatever happened)."""
    tmp = tmp_path_factory.mktemp("slurm")
    (tmp / "job.toml").write_text(JOB_TOML)
    proc = _sbatch(tmp, "job.toml", "--num-env-runners", "2")
    assert proc.returncode == 0, proc.stderr
    j = Job(proc.stdout.strip().split(";")[0], tmp)
    try:
        yield j
    finally:
        _cancel(j.job_id)


def test_bad_input_fails_the_job_with_a_message(slurm, tmp_path):
    (tmp_path / "job.toml").write_text(JOB_TOML)
    open_token = tmp_path / "open-token"
    open_token.write_text("secret\n")
    open_token.chmod(0o644)
    empty_token = tmp_path / "empty-token"
    empty_token.write_text("")
    empty_token.chmod(0o600)
    cases = {
        "none": ((), {}, "no job file given"),
        "missing": (("nope.toml",), {}, "job file nope.toml does not exist"),
        "open-token": (("job.toml",), {"FTRL_TOKEN_FILE": str(open_token)},
                       "can be read by group or others (mode 0644)"),
        "empty-token": (("job.toml",), {"FTRL_TOKEN_FILE": str(empty_token)}, "is empty"),
        "bad-option": (("job.toml", "--coordinator", "x:1"), {}, "--coordinator is set by the launcher"),
        "no-python": (("job.toml",), {"FTRL_PYTHON": "/nonexistent/python"}, "no Python interpreter"),
    }
    procs = {}
    for name, (args, extra, _) in cases.items():
        out = tmp_path / f"{name}.out"
        argv = ["sbatch", "-N1", "--wait", f"--output={out}", str(SBATCH), *args]
        procs[name] = subprocess.Popen(argv, cwd=tmp_path, env=_env(**extra), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    for name, (_, _, message) in cases.items():
        stdout, _ = procs[name].communicate(timeout=120)
        text = (tmp_path / f"{name}.out").read_text()
        assert procs[name].returncode == 2, (name, stdout, text)  # sbatch --wait: the job's status
        assert message in text, (name, text)
        assert "ftrl.sbatch: error:" in text, (name, text)
    assert not [d for d in tmp_path.glob("ftrl-*") if d.is_dir()], "bad input started nothing"


def test_job_trains_across_both_nodes(job):
    wait_until(lambda: (job.run_dir / "cluster.env").exists(), 60, 0.2,
               what=f"the coordinator to start\n{job.describe()}")
    assert (job.run_dir / "token").stat().st_mode & 0o777 == 0o600
    assert job.run_dir.stat().st_mode & 0o777 == 0o700

    def spread() -> dict | None:
        status = job.status()
        nodes = {a["node_id"] for a in status["actors"] if a["state"] == "ALIVE"}
        jobs = {j["job_id"]: j for j in status["jobs"]}
        mine = jobs.get(f"slurm-{job.job_id}")
        ok = nodes >= {"slurm-n1", "slurm-n2"} and mine and mine["iteration"] >= 3
        return status if ok else None

    status = wait_until(spread, 120, 0.5, what=f"actors on both nodes and 3 iterations\n{job.describe()}")
    assert {n["node_id"]: n["state"] for n in status["nodes"]} == {"slurm-n1": "ALIVE", "slurm-n2": "ALIVE"}
    assert {n["address"] for n in status["nodes"]} == {"127.0.0.1"}  # NodeAddr, not the name n1
    names = {a["name"] for a in status["actors"]}
    assert {f"slurm-{job.job_id}/algorithm", f"slurm-{job.job_id}/env_runner/0",
            f"slurm-{job.job_id}/env_runner/1"} <= names
    # the token is on no command line, and in the environment of none of the processes
    # the launcher starts (actor processes get it from their worker, as everywhere)
    token = (job.run_dir / "token").read_text().strip()
    launched = 0
    for proc in _job_processes(job.job_id):
        with contextlib.suppress(psutil.Error):
            cmd = proc.cmdline()
            assert token not in " ".join(cmd)
            if cmd[1:3] in (["-m", "ftrl"], ["-m", "ftrl.launch.slurm"]) or Path(cmd[0]).name == "srun":
                launched += 1
                assert token not in "".join(proc.environ().values()), cmd
    assert launched >= 7  # launcher, coordinator, follower, srun, 2 supervisors, 2 workers


def test_killed_worker_is_restarted_and_training_goes_on(job):
    wait_until(lambda: _pids_of_worker("slurm-n2", job.run_dir), 60, 0.2, what="the worker of slurm-n2")
    [pid] = _pids_of_worker("slurm-n2", job.run_dir)
    before = len(job.iterations())
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: [p for p in _pids_of_worker("slurm-n2", job.run_dir) if p != pid], 60, 0.2,
               what=f"the worker step to start slurm-n2's worker again\n{job.describe()}")
    assert "slurm-n2: worker exited with status -9; restart 1 of 10" in job.out

    def back() -> bool:
        status = job.status()
        alive = {n["node_id"] for n in status["nodes"] if n["state"] == "ALIVE"}
        return alive == {"slurm-n1", "slurm-n2"} and len(job.iterations()) >= before + 5

    wait_until(back, 120, 0.5, what=f"slurm-n2 back and training going on\n{job.describe()}")


def test_killed_coordinator_is_restarted_on_its_port(job):
    address = job.cluster()["FTRL_COORDINATOR"]
    [pid] = [p.pid for p in _job_processes(job.job_id) if p.cmdline()[1:5] == ["-m", "ftrl", "--log-level", "INFO"]
             and "coordinator" in p.cmdline()]
    before = len(job.iterations())
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: "starting it again on port" in job.out, 30, 0.2, what=f"the restart\n{job.describe()}")

    def back() -> bool:
        status = job.status()
        alive = {n["node_id"] for n in status["nodes"] if n["state"] == "ALIVE"}
        return alive == {"slurm-n1", "slurm-n2"} and status["cluster"]["uptime_s"] < 60

    wait_until(back, 60, 0.5, what=f"the workers back on the restarted coordinator\n{job.describe()}")
    assert job.cluster()["FTRL_COORDINATOR"] == address  # same port: workers and follower reconnect
    wait_until(lambda: len(job.iterations()) >= before + 5, 60, 0.5, what="training to go on")


def test_requeue_resumes_from_the_state_dir_and_checkpoint(job):
    wait_until(lambda: len(job.iterations()) >= 3, 60, 0.2, what="training")
    subprocess.run(["scontrol", "requeue", job.job_id], check=True, capture_output=True, timeout=30)
    wait_until(lambda: "requeues the job" in job.out, 30, 0.2, what=f"the requeue\n{job.describe()}")
    wait_until(lambda: _squeue_state(job.job_id) == "PENDING", 30, 0.2, what="the job to be requeued")
    at_requeue = job.iterations()[-1]
    newest = sorted((job.output / "checkpoints").glob("checkpoint_*.ftrl"))[-1]
    checkpoint_iter = decode_checkpoint(newest.read_bytes())["iteration"]
    assert checkpoint_iter >= at_requeue - CHECKPOINT_INTERVAL
    t0 = time.monotonic()
    wait_until(lambda: "restart 1 of SLURM job" in job.out, 60, 0.2,
               what=f"the requeued run to start\n{job.describe()}")
    wait_until(lambda: job.iterations() and job.iterations()[-1] >= at_requeue + 5, 120, 0.5,
               what=f"training to go on after the requeue\n{job.describe()}")
    print(f"requeue: running again and {at_requeue + 5} iterations after {time.monotonic() - t0:.1f}s")
    iterations = job.iterations()
    assert iterations == list(range(1, len(iterations) + 1)), "iterations went backwards or skipped"
    assert (job.run_dir / f"state-{job.job_id}").is_dir()  # the same state dir, restored
    assert "resuming from" in job.out
    status = job.status()
    mine = next(j for j in status["jobs"] if j["job_id"] == f"slurm-{job.job_id}")
    assert mine["stage"] == "RUNNING" and mine["iteration"] > at_requeue


def test_scancel_stops_everything_with_a_whole_checkpoint(job):
    wait_until(lambda: len(job.iterations()) >= 3, 60, 0.2, what="training")
    time.sleep(1.0)
    t0 = time.monotonic()
    subprocess.run(["scancel", job.job_id], check=True, capture_output=True, timeout=30)
    wait_until(lambda: not _job_processes(job.job_id), KILL_WAIT_S + 3, 0.1,
               what=f"every process of the job to exit\n{job.describe()}")
    gone = time.monotonic() - t0
    print(f"scancel: all processes gone after {gone:.1f}s")
    assert "stopping job slurm-" in job.out and "newest checkpoint:" in job.out
    last = job.iterations()[-1]
    newest = sorted((job.output / "checkpoints").glob("checkpoint_*.ftrl"))[-1]
    state = decode_checkpoint(newest.read_bytes())  # whole: checksum and length verified
    assert last - CHECKPOINT_INTERVAL <= state["iteration"] <= last
    wait_until(lambda: _squeue_state(job.job_id) == "", 30, 0.5, what="the job to leave the queue")


def test_a_finished_job_completes_and_its_workers_drain(slurm, tmp_path):
    (tmp_path / "job.toml").write_text(JOB_TOML)
    proc = _sbatch(tmp_path, "job.toml", "--stop-iters", "5")
    assert proc.returncode == 0, proc.stderr
    j = Job(proc.stdout.strip().split(";")[0], tmp_path)
    try:
        wait_until(lambda: _squeue_state(j.job_id) == "", 180, 0.5, what=f"the job to end\n{j.describe()}")
        info = subprocess.run(["scontrol", "show", "job", j.job_id], capture_output=True, text=True,
                              timeout=30).stdout
        assert "JobState=COMPLETED" in info and "ExitCode=0:0" in info, info + j.describe()
        assert json.loads((j.output / "result.json").read_text())["iteration"] == 5
        assert j.out.count("worker exited with status 0 (drained)") == 2, j.describe()
        assert "ftrl train exited with status 0" in j.out
        wait_until(lambda: not _job_processes(j.job_id), 10, 0.2, what="no process left")
    finally:
        _cancel(j.job_id)
