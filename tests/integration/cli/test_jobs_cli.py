"""Jobs on a running cluster through the `ftrl` program: submit, status, scale, stop,
resubmit with --resume, and `ftrl train --detach`; results() replays every iteration."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.cluster import COUNTER, running_train, wait_until
from tests.integration.cli.test_cli import _ftrl, run_ftrl

JOB = """\
algo = "PPO"
[environment]
env = "CartPole-v1"
[env_runners]
num_env_runners = 1
num_envs_per_env_runner = 2
[training]
train_batch_size = 64
minibatch_size = 64
num_epochs = 1
[checkpointing]
checkpoint_interval = 2
"""


def _iterations(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines() if line.endswith("}")]


def _job_events(client, job_id: str, after_seq: int) -> list[str]:
    """The stages the job went through, from its JOB events."""
    events = client.events(prefix=job_id, after_seq=after_seq, timeout=1.0)
    return [e["message"].split(":")[0] for e in events if e["type"] == "JOB" and e["actor"] == job_id]


@pytest.fixture
def cluster(make_cluster):
    return make_cluster(slots=3, preload="ftrl.rl.sampling.env_runner")


def test_submit_status_scale_stop_resume(cluster, tmp_path):
    job_file, out = tmp_path / "job.toml", tmp_path / "out"
    job_file.write_text(JOB)
    at = ["--coordinator", cluster.address, "--token-file", str(cluster.token_file)]
    client = cluster.client()
    seq0 = client.cluster_info()["event_seq"]

    # a bad key fails before anything is sent, with the nearest name
    proc = run_ftrl("submit", str(job_file), "--set", "train_batch_sise=64", *at)
    assert proc.returncode == 2 and "did you mean 'train_batch_size'" in proc.stderr, proc.stderr

    proc = run_ftrl("submit", str(job_file), "--job-name", "jc", "--output", str(out), *at)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "jc"
    proc = run_ftrl("submit", str(job_file), "--job-name", "jc", "--output", str(tmp_path / "other"), *at)
    assert proc.returncode == 1 and "job 'jc' exists" in proc.stderr, proc.stderr

    wait_until(lambda: client.job_status("jc")["iteration"] >= 2, timeout=120, what="two iterations")
    proc = run_ftrl("status", "jc", "--json", *at)
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["job_id"] == "jc" and status["stage"] == "RUNNING" and status["iteration"] >= 2
    assert status["output_dir"] == str(out) and status["num_env_runners"] == 1
    assert status["metrics"]["iteration"] >= 2 and status["metrics"]["num_healthy_env_runners"] == 1
    assert set(status["actors"]) == {"jc/algorithm", "jc/env_runner/0"}
    proc = run_ftrl("status", "jc", *at)
    assert proc.returncode == 0 and "RUNNING" in proc.stdout and "jc/env_runner/0" in proc.stdout
    proc = run_ftrl("status", *at)
    assert proc.returncode == 0 and "JOB" in proc.stdout
    assert any(line.startswith("jc ") and " RUNNING " in line for line in proc.stdout.splitlines()), proc.stdout
    assert "jobs" in json.loads(run_ftrl("status", "--json", *at).stdout)

    # scale out: the driver creates the second runner at its next iteration boundary
    proc = run_ftrl("scale", "jc", "--env-runners", "2", *at)
    assert proc.returncode == 0 and "2 env runners" in proc.stdout, proc.stderr
    wait_until(lambda: client.job_status("jc")["metrics"].get("num_healthy_env_runners") == 2, timeout=120,
               what="two healthy runners")
    assert "jc/env_runner/1" in client.job_status("jc")["actors"]

    proc = run_ftrl("stop", "jc", "--wait", *at, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("job jc: STOPPED"), proc.stdout
    final = client.job_status("jc")
    assert final["stage"] == "STOPPED" and final["stop_requested"]
    assert final["last_checkpoint"].endswith(f"checkpoint_{final['iteration']:08d}.ftrl")
    wait_until(lambda: not client.job_status("jc")["actors"], timeout=30, what="the job's actors to end")
    assert _job_events(client, "jc", seq0)[:4] == ["PENDING", "STARTING", "RUNNING", "STOPPED"]
    rows = list(client.results("jc", follow=False))
    assert [r["iteration"] for r in rows] == list(range(1, final["iteration"] + 1)) == _iterations(out)
    assert rows[-1]["num_env_runners"] == 2
    proc = run_ftrl("stop", "jc", "--wait", *at)  # stopping an ended job changes nothing
    assert proc.returncode == 0 and "STOPPED" in proc.stdout
    proc = run_ftrl("scale", "jc", "--learners", "1", *at)
    assert proc.returncode == 2 and "has ended" in proc.stderr

    # the output holds checkpoints: a fresh submit is refused, --resume goes on from them
    proc = run_ftrl("submit", str(job_file), "--job-name", "jc", "--output", str(out), *at)
    assert proc.returncode == 2 and "resume" in proc.stderr, proc.stderr
    stop_at = final["iteration"] + 2
    proc = run_ftrl("submit", str(job_file), "--job-name", "jc", "--output", str(out), "--resume",
                    "--stop-iters", str(stop_at), *at)
    assert proc.returncode == 0, proc.stderr
    rows = list(client.results("jc"))  # the new job's rows, followed to its end
    assert [r["iteration"] for r in rows] == [stop_at - 1, stop_at]
    assert _iterations(out) == list(range(1, stop_at + 1))
    done = client.job_status("jc")
    assert done["stage"] == "FINISHED" and done["reason"] == "stop_iters" and done["iteration"] == stop_at


def test_unknown_job_and_node_readmit(make_cluster):
    cluster = make_cluster(workers=1, slots=2, max_node_failures=1)
    at = ["--coordinator", cluster.address, "--token-file", str(cluster.token_file)]
    for argv in (["status", "nope"], ["stop", "nope"], ["scale", "nope", "--env-runners", "1"]):
        proc = run_ftrl(*argv, *at)
        assert proc.returncode == 1 and "no job 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_ftrl("node", "readmit", "nope", *at)
    assert proc.returncode == 1 and "no node 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_ftrl("node", "readmit", "local-0", *at)
    assert proc.returncode == 2 and "not EXCLUDED" in proc.stderr
    # two failures on a node allowed one: EXCLUDED; readmitted, it takes the actor back
    c = cluster.client()
    c.create_actor(COUNTER, name="flaky", max_restarts=-1)
    first = c.wait_actor("flaky", 30)
    os.kill(first["pid"], signal.SIGKILL)
    second = c.wait_actor("flaky", 30, min_incarnation=first["incarnation"] + 1)
    assert second["state"] == "ALIVE" and second["pid"] > 0
    os.kill(second["pid"], signal.SIGKILL)
    wait_until(lambda: c.nodes()[0]["state"] == "EXCLUDED", timeout=30, what="the node's exclusion")
    proc = run_ftrl("node", "readmit", "local-0", *at)
    assert proc.returncode == 0 and proc.stdout.strip() == "node local-0: ALIVE", proc.stderr
    assert c.wait_actor("flaky", 30)["node_id"] == "local-0"


def test_train_detach_then_stop(cluster, tmp_path):
    at = ["--coordinator", cluster.address, "--token-file", str(cluster.token_file)]
    out = tmp_path / "run"
    proc = run_ftrl("train", "--env", "CartPole-v1", "--num-env-runners", "1", "--output", str(out),
                    "--job-name", "det", "--set", "train_batch_size=64", "--set", "minibatch_size=64",
                    "--set", "num_epochs=1", "--detach", *at)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "det" and "ftrl stop det" in proc.stderr
    client = cluster.client()
    wait_until(lambda: client.job_status("det")["iteration"] >= 1, timeout=120, what="an iteration")
    final = client.stop("det", wait=True, timeout=120)
    assert final["stage"] == "STOPPED" and not final["actors"]
    assert json.loads((out / "result.json").read_text())["stop_reason"] == "stopped"


def test_train_follows_its_job_through_a_coordinator_restart(make_cluster, tmp_path):
    """`ftrl train --coordinator` keeps following while the coordinator is killed and
    started again on its state dir; Ctrl-C then stops the job (exit 130), and the job's
    results replay every iteration once, in order, as metrics.jsonl has them."""
    cluster = make_cluster(slots=3, preload="ftrl.rl.sampling.env_runner")
    out = tmp_path / "run"
    with running_train(
        [*_ftrl(), "train", "--env", "CartPole-v1", "--num-env-runners", "1", "--output", str(out),
         "--job-name", "cr", "--set", "train_batch_size=64", "--set", "minibatch_size=64",
         "--set", "num_epochs=1", "--quiet", "--coordinator", cluster.address,
         "--token-file", str(cluster.token_file)],
        env={k: v for k, v in os.environ.items() if not k.startswith("FTRL_")}) as proc:
        wait_until(lambda: len(_iterations(out)) >= 3, timeout=120, what="three iterations")
        cluster.coordinator_proc.send_signal(signal.SIGKILL)
        cluster.coordinator_proc.wait(10)
        time.sleep(1.0)
        cluster.start_coordinator()
        client = cluster.client()
        after = client.job_status("cr")["iteration"]
        wait_until(lambda: client.job_status("cr")["iteration"] > after + 2, timeout=60,
                   what="iterations reported to the restarted coordinator")
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "coordinator unreachable" in stderr and "stopped on request" in stderr
    final = client.job_status("cr")
    assert final["stage"] == "STOPPED"
    rows = [r["iteration"] for r in client.results("cr", follow=False)]
    assert rows == list(range(1, final["iteration"] + 1)) == _iterations(out)
