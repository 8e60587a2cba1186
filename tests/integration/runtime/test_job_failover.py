"""Jobs on a coordinator that is killed with SIGKILL: training goes on without it, and the
restarted coordinator (same state dir) picks the job up where it is."""

from __future__ import annotations

import json
import signal

from tests.cluster import wait_until

JOB = {"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 1, "num_envs_per_env_runner": 4,
       "train_batch_size": 256, "minibatch_size": 128, "num_epochs": 2,
       "checkpoint_interval": 1, "stop": {"stop_iters": 10_000}}


def _rows(output) -> list[dict]:
    path = output / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_job_survives_coordinator_kill_and_two_jobs_side_by_side(make_cluster, tmp_path):
    cl = make_cluster(workers=1, slots=3)
    c = cl.client()
    first, second = tmp_path / "first", tmp_path / "second"
    assert c.submit(JOB, job_id="first", output_dir=str(first)) == "first"
    c.submit({**JOB, "num_env_runners": 1}, job_id="second", output_dir=str(second))
    status = wait_until(lambda: (s := c.job_status("first"))["iteration"] >= 2 and s, 180,
                        what="the first job to train")
    assert status["stage"] == "RUNNING" and "first/algorithm" in status["actors"]
    wait_until(lambda: c.job_status("second")["iteration"] >= 1, 180, what="the second job to train")
    driver = c.actor("first/algorithm")

    # stopping one job leaves the other untouched
    stopped = c.stop("second", wait=True, timeout=120)
    assert stopped["stage"] == "STOPPED", stopped
    assert (second / "checkpoints").is_dir() and any((second / "checkpoints").iterdir())
    assert c.job_status("first")["stage"] == "RUNNING"
    assert not [a for a in c.actors(prefix="second/") if a["state"] != "DEAD"]

    before = c.job_status("first")
    cl.coordinator_proc.send_signal(signal.SIGKILL)
    cl.coordinator_proc.wait(10)
    at_kill = len(_rows(first))
    wait_until(lambda: len(_rows(first)) >= at_kill + 3, 60,
               what="training to go on while the coordinator is down")

    cl.start_coordinator()
    cl.wait_nodes(["local-0"], timeout=60)
    after = wait_until(lambda: (s := c.job_status("first"))["iteration"] > before["iteration"]
                       and s["stage"] == "RUNNING" and s, 120, what="the job RUNNING after the restart")
    assert after["env_steps_sampled"] >= before["env_steps_sampled"]
    again = c.actor("first/algorithm")
    assert (again["pid"], again["incarnation"]) == (driver["pid"], driver["incarnation"])
    assert c.job_status("second")["stage"] == "STOPPED"

    # results replay every iteration from the first, in order, none missing: once the
    # rows queued during the outage followed the newest one (sent first after it)
    def replayed() -> list[int] | None:
        iterations = [r["iteration"] for r in c.results("first", follow=False)]
        complete = iterations == list(range(1, len(iterations) + 1))
        return iterations if complete and len(iterations) >= after["iteration"] - 1 else None

    wait_until(replayed, 60, what="every row of the outage replayed, in order")

    final = c.stop("first", wait=True, timeout=120)
    assert final["stage"] == "STOPPED"
    assert (first / "result.json").exists()


def test_coordinator_killed_in_a_short_lived_stage_and_during_a_scale(make_cluster, tmp_path):
    cl = make_cluster(workers=1, slots=3)
    c = cl.client()
    out = tmp_path / "job"
    c.submit(JOB, job_id="short", output_dir=str(out))
    # killed at once: the job is PENDING or STARTING (its driver not reporting yet)
    stage = c.job_status("short")["stage"]
    assert stage in ("PENDING", "STARTING"), stage
    cl.coordinator_proc.send_signal(signal.SIGKILL)
    cl.coordinator_proc.wait(10)
    cl.start_coordinator()
    cl.wait_nodes(["local-0"], timeout=60)
    wait_until(lambda: (s := c.job_status("short"))["stage"] == "RUNNING" and s["iteration"] >= 1, 180,
               what="the job RUNNING after a restart in its starting stage")
    driver = c.actor("short/algorithm")
    assert (driver["incarnation"], driver["restarts"]) == (1, 0)  # its one start, not redone

    scaled = c.scale("short", env_runners=2)  # accepted = durable: survives the kill right after
    assert scaled["num_env_runners"] == 2
    cl.coordinator_proc.send_signal(signal.SIGKILL)
    cl.coordinator_proc.wait(10)
    cl.start_coordinator()
    cl.wait_nodes(["local-0"], timeout=60)
    assert c.job_status("short")["num_env_runners"] == 2
    wait_until(lambda: any(r.get("num_env_runners") == 2 and r.get("num_healthy_env_runners") == 2
                           for r in _rows(out)), 180, what="the scale applied after the restart")
    assert c.stop("short", wait=True, timeout=120)["stage"] == "STOPPED"


def test_worker_drained_by_sigterm_loses_no_iteration(make_cluster, tmp_path):
    cl = make_cluster(workers=2, slots=3)
    c = cl.client()
    out = tmp_path / "drained"
    c.submit({**JOB, "checkpoint_interval": 50}, job_id="drained", output_dir=str(out))
    wait_until(lambda: c.job_status("drained")["iteration"] >= 2, 180, what="the job to train")
    driver = c.actor("drained/algorithm")
    host = driver["node_id"]
    other = "local-1" if host == "local-0" else "local-0"
    worker = cl.worker_procs[host]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(90) == 0  # drained, then exited cleanly
    moved = wait_until(lambda: (a := c.actor("drained/algorithm"))["state"] == "ALIVE"
                       and a["node_id"] == other and a, 90, what="the driver moved to the other node")
    assert moved["incarnation"] > driver["incarnation"]
    assert moved["restarts"] == driver["restarts"]  # a move, not a failure
    last = len(_rows(out))
    wait_until(lambda: len(_rows(out)) >= last + 2, 180, what="training to go on after the drain")
    rows = _rows(out)
    iterations = [r["iteration"] for r in rows]
    # the drained driver checkpointed its last iteration: the next one resumes right after it
    assert iterations == list(range(1, len(iterations) + 1)), iterations
    steps = [r["env_steps_sampled"] for r in rows]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert c.job_status("drained")["stage"] == "RUNNING"
    assert {n["node_id"]: n["state"] for n in c.nodes()}[other] == "ALIVE"
