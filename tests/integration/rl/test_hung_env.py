"""An env whose `step` (or whose constructor) hangs inside a runner actor: the runner's
watchdog kills the process after `env_step_timeout_s`, the worker restarts it in place,
and training goes on. One that crashes its runner mid-step is restarted the same way."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ftrl.config import PPOConfig
from tests.cluster import event_seq, pid_gone, wait_event, wait_until

JOB = "hung"


def _config(mode: str, marker: str, **env_config) -> PPOConfig:
    return (
        PPOConfig()
        .environment("ftrl.testing.envs:make_hang_env",
                     env_config={"hang_after": 40, "mode": mode, "marker": marker, **env_config})
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2, env_step_timeout_s=2.0,
                     sample_timeout_s=30.0)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .fault_tolerance(restart_failed_env_runners=True)
        .debugging(seed=0)
    )


def _runners(client) -> dict[str, dict]:
    return {a["name"]: a for a in client.actors() if a["name"].startswith(f"{JOB}/env_runner/")}


@pytest.mark.parametrize("mode", ["sleep", "spin"])
def test_hung_env_step_kills_and_restarts_the_runner(make_cluster, tmp_path, mode):
    cluster = make_cluster(slots=2, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    marker = tmp_path / "hung-once"
    seq = event_seq(client)
    algo = _config(mode, str(marker)).build(client=client, output_dir=tmp_path / "out", job_name=JOB)
    try:
        before = _runners(client)
        assert len(before) == 2
        t0 = time.monotonic()
        results = []
        # 32 steps per env per iteration: the hang comes in the 2nd iteration
        while not marker.exists() and time.monotonic() - t0 < 20:
            results.append(algo.train())
        assert marker.exists(), "no env hung"
        wait_until(lambda: marker.read_text().strip(), timeout=5, what="the marker's pid")
        hung_pid = int(marker.read_text())
        victim = next(name for name, a in before.items() if a["pid"] == hung_pid)
        died = wait_event(client, seq, lambda e: e["type"] == "DIED" and e["actor"] == victim,
                          prefix=JOB, timeout=30)
        assert "watchdog" in died["message"] and "env step hung for" in died["message"], died
        assert died["incarnation"] == before[victim]["incarnation"]
        wait_until(lambda: pid_gone(hung_pid), timeout=10, what="the hung process to be gone")
        # training goes on, and the group gets the restarted runner back
        healthy = wait_until(lambda: (r := algo.train())["num_healthy_env_runners"] == 2 and r, timeout=30,
                             what="both runners healthy again")
        assert healthy["num_env_runner_restarts"] >= 1
        for _ in range(2):
            last = algo.train()
        assert last["iteration"] > len(results) + 1
        assert last["env_steps_sampled"] > healthy["env_steps_sampled"]
        after = _runners(client)[victim]
        assert after["state"] == "ALIVE" and after["pid"] != hung_pid
        assert after["incarnation"] > before[victim]["incarnation"] and after["restarts"] >= 1
        assert time.monotonic() - t0 < 60
    finally:
        algo.stop()
    logs = "".join(p.read_text(errors="replace") for p in cluster.state_dir.rglob("*.log"))
    assert "event=WATCHDOG_KILL" in logs


def test_a_sub_env_that_segfaults_mid_step_kills_only_its_runner(make_cluster, tmp_path):
    """The crash comes inside the runner's vector step (the C loop where it is built, as
    here): the worker sees the process die by SIGSEGV, restarts it in place, and the
    group gets it back while training goes on."""
    cluster = make_cluster(slots=2, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    marker = tmp_path / "crashed-once"
    seq = event_seq(client)
    algo = _config("segfault", str(marker)).build(client=client, output_dir=tmp_path / "out", job_name=JOB)
    try:
        before = _runners(client)
        t0 = time.monotonic()
        while not marker.exists() and time.monotonic() - t0 < 20:
            algo.train()
        assert marker.exists(), "no env crashed"
        wait_until(lambda: marker.read_text().strip(), timeout=5, what="the marker's pid")
        victim = next(name for name, a in before.items() if a["pid"] == int(marker.read_text()))
        died = wait_event(client, seq, lambda e: e["type"] == "DIED" and e["actor"] == victim,
                          prefix=JOB, timeout=30)
        assert "SIGSEGV" in died["message"], died
        healthy = wait_until(lambda: (r := algo.train())["num_healthy_env_runners"] == 2 and r, timeout=30,
                             what="both runners healthy again")
        last = algo.train()
        assert last["env_steps_sampled"] > healthy["env_steps_sampled"]
        after = _runners(client)[victim]
        assert after["state"] == "ALIVE" and after["restarts"] >= 1
        assert after["incarnation"] > before[victim]["incarnation"]
    finally:
        algo.stop()


def test_hung_env_constructor_kills_and_restarts_the_runner(make_cluster, tmp_path):
    """The first runner process to build an env hangs in its constructor: no step ever
    runs there, yet the watchdog ends it and the restarted runner joins the group."""
    cluster = make_cluster(slots=2, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    marker = tmp_path / "hung-once"
    seq = event_seq(client)
    t0 = time.monotonic()
    algo = _config("sleep", str(marker), hang_in="make", only_in_actors=True).build(
        client=client, output_dir=tmp_path / "out", job_name=JOB)
    try:
        assert marker.exists(), "no env constructor hung"
        wait_until(lambda: marker.read_text().strip(), timeout=5, what="the marker's pid")
        hung_pid = int(marker.read_text())
        died = wait_event(client, seq, lambda e: e["type"] == "DIED" and e["actor"].startswith(f"{JOB}/env_runner/"),
                          prefix=JOB, timeout=30)
        assert "watchdog" in died["message"] and "env construction hung for" in died["message"], died
        wait_until(lambda: pid_gone(hung_pid), timeout=10, what="the hung process to be gone")
        healthy = wait_until(lambda: (r := algo.train())["num_healthy_env_runners"] == 2 and r, timeout=60,
                             what="both runners healthy")
        last = algo.train()
        assert last["env_steps_sampled"] > healthy["env_steps_sampled"]
        after = _runners(client)[died["actor"]]
        assert after["state"] == "ALIVE" and after["pid"] != hung_pid and after["restarts"] >= 1
        assert time.monotonic() - t0 < 90
    finally:
        algo.stop()


def test_hung_env_in_a_driver_that_samples_itself_restarts_the_driver(make_cluster, tmp_path):
    """num_env_runners=0 (the example file's default): the driver actor samples with its
    own runner. Its env hangs: the watchdog ends the driver, the worker restarts it, and
    it resumes from its newest checkpoint."""
    cluster = make_cluster(slots=2, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    marker = tmp_path / "hung-once"
    out = tmp_path / "run"
    seq = event_seq(client)
    job = {
        "algo": "PPO",
        "environment": {"env": "ftrl.testing.envs:make_hang_env",
                        "env_config": {"hang_after": 100, "mode": "spin", "marker": str(marker)}},
        "env_runners": {"num_env_runners": 0, "num_envs_per_env_runner": 2, "env_step_timeout_s": 2.0},
        "training": {"train_batch_size": 64, "minibatch_size": 64, "num_epochs": 1},
        "checkpointing": {"checkpoint_interval": 1},
        "debugging": {"seed": 0},
        "stop": {"stop_iters": 1_000_000},
    }
    t0 = time.monotonic()
    job_id = client.submit(job, job_id="hd", output_dir=str(out))
    try:
        wait_until(lambda: marker.exists() and marker.read_text().strip(), timeout=60, what="the env to hang")
        hung_pid = int(marker.read_text())
        died = wait_event(client, seq, lambda e: e["type"] == "DIED" and e["actor"] == "hd/algorithm",
                          prefix="hd", timeout=30)
        assert "watchdog" in died["message"] and "env step hung for" in died["message"], died
        wait_until(lambda: pid_gone(hung_pid), timeout=10, what="the hung driver to be gone")
        before = client.job_status(job_id)["iteration"]
        wait_until(lambda: client.job_status(job_id)["iteration"] >= before + 3, timeout=60,
                   what="the restarted driver to train on")
        driver = next(a for a in client.actors() if a["name"] == "hd/algorithm")
        assert driver["state"] == "ALIVE" and driver["pid"] != hung_pid and driver["restarts"] >= 1
        assert client.job_status(job_id)["stage"] == "RUNNING"
        assert time.monotonic() - t0 < 120
    finally:
        client.stop(job_id)


def test_a_paused_runner_is_not_killed_by_its_watchdog(make_cluster, tmp_path):
    """A runner actor SIGSTOPped mid-sample for 3x its `env_step_timeout_s` (shorter than
    the worker's hang timeout, as a short VM pause would be): once continued, its
    watchdog does not count the pause, and the sample completes in the same process.
    The env steps only when the test writes a byte, and the test waits 0.5 s after
    SIGCONT before the next one, so a watchdog that counted the pause would fire first."""
    cluster = make_cluster(slots=1, preload="ftrl.rl.sampling.env_runner", actor_hang_timeout=30.0)
    client = cluster.client()
    fifo = tmp_path / "steps"
    os.mkfifo(fifo)
    cfg = (
        PPOConfig()
        .environment("ftrl.testing.envs:make_paced_env", env_config={"fifo": str(fifo)})
        .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=20, env_step_timeout_s=1.0,
                     sample_timeout_s=60.0)
        .debugging(seed=0)
    )
    name = f"{JOB}/env_runner/paused"
    runner = client.create_actor("ftrl.rl.sampling.env_runner:EnvRunner", name=name, max_restarts=0,
                                 kwargs={"config": cfg.to_dict(), "worker_index": 1})
    before = client.actor(name)
    steps = os.open(fifo, os.O_WRONLY)  # the env holds the read end
    try:
        reply = runner.submit("sample")
        for _ in range(5):
            os.write(steps, b"s")
            time.sleep(0.05)
        os.kill(before["pid"], signal.SIGSTOP)
        try:
            time.sleep(3.0)
        finally:
            os.kill(before["pid"], signal.SIGCONT)
        time.sleep(0.5)  # the watchdog ticks every 0.125 s
        try:
            os.write(steps, b"s" * 15)
        except BrokenPipeError:
            pytest.fail("the runner process is gone: its watchdog counted the pause")
        out = reply.result(timeout=30)
    finally:
        os.close(steps)
    assert out["env_steps"] == 20
    after = client.actor(name)
    assert after["state"] == "ALIVE" and after["pid"] == before["pid"]
    assert after["incarnation"] == before["incarnation"] and after["restarts"] == 0
