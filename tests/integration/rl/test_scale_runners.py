"""Scaling a running job's env runners on a real cluster: a CartPole PPO job submitted
through the jobs API grows 1 -> 3 and shrinks 3 -> 1 while it trains; the driver's job
link carries the requests (its replies) and the rows back. And a drained driver (its
process got SIGTERM, as on a pre-emption) leaves the job running for its next
incarnation."""

from __future__ import annotations

import itertools
import json
import os
import signal
from pathlib import Path

from tests.cluster import wait_until

JOB = {
    "algo": "PPO",
    "environment": {"env": "CartPole-v1"},
    # one runner's fragment fills the batch: with 3 runners a synchronous round brings 3
    # fragments and all are used (train_batch_size is a minimum), so nothing is dropped
    "env_runners": {"num_env_runners": 1, "num_envs_per_env_runner": 1, "rollout_fragment_length": 32,
                    "sample_timeout_s": 10.0},
    "training": {"train_batch_size": 32, "minibatch_size": 32, "num_epochs": 1},
    "checkpointing": {"checkpoint_interval": 1000},
    "debugging": {"seed": 1},
    "stop": {"stop_iters": 1_000_000},
}


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _rows_after(out: Path, iteration: int) -> list[dict]:
    return [r for r in _rows(out) if r["iteration"] > iteration]


def test_env_runners_grow_and_shrink_while_a_job_trains(make_cluster, tmp_path):
    cluster = make_cluster(slots=4, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    out = tmp_path / "run"
    job = client.submit(JOB, job_id="sc", output_dir=str(out))
    wait_until(lambda: len(_rows(out)) >= 3, timeout=120, what="three iterations")
    assert {r["num_env_runners"] for r in _rows(out)} == {1}

    # grow 1 -> 3: the new runners join with the current weights
    client.scale(job, env_runners=3)
    grown = wait_until(lambda: [r for r in _rows(out) if r["num_healthy_env_runners"] == 3], timeout=60,
                       what="three healthy runners in the rows")[0]
    first3 = min(r["iteration"] for r in _rows(out) if r["num_env_runners"] == 3)
    assert all(r["num_env_runners"] == 3 for r in _rows_after(out, first3 - 1))  # never back meanwhile
    for name in ("sc/env_runner/1", "sc/env_runner/2"):
        ping = client.get_actor(name).call("ping")
        # synced at its join and after every iteration since: at most the one in progress behind
        assert ping["weights_version"] >= grown["weights_version"] - 1 >= 0, (name, ping, grown)
    wait_until(lambda: len(_rows_after(out, grown["iteration"])) >= 3, timeout=60, what="iterations with 3")
    rows3 = [r for r in _rows_after(out, grown["iteration"]) if r["num_healthy_env_runners"] == 3]
    assert rows3[-1]["env_steps_dropped"] == 0  # every fragment a calm round asked for is used
    steps = [b["env_steps_sampled"] - a["env_steps_sampled"] for a, b in itertools.pairwise(rows3)
             if b["iteration"] == a["iteration"] + 1]
    assert 3 * 32 in steps, steps  # one round of 3 fragments per iteration: a 96-step batch

    # shrink 3 -> 1: the highest indices leave, their last samples counted, then killed
    client.scale(job, env_runners=1)
    shrunk = wait_until(lambda: [r for r in _rows_after(out, grown["iteration"]) if r["num_env_runners"] == 1],
                        timeout=60, what="one runner in the rows")[0]
    wait_until(lambda: {client.actor(n)["state"] for n in ("sc/env_runner/1", "sc/env_runner/2")} == {"DEAD"},
               timeout=30, what="the scaled-away runners to be killed")
    for name in ("sc/env_runner/1", "sc/env_runner/2"):
        assert "scaled down" in client.actor(name)["death_reason"]
    assert client.actor("sc/env_runner/0")["state"] == "ALIVE"
    settled = wait_until(lambda: [r for r in _rows_after(out, shrunk["iteration"])
                                  if r["num_samples_in_flight"] == 0], timeout=60,
                         what="no sample left in flight")[0]
    assert settled["num_env_runners"] == 1 and settled["num_healthy_env_runners"] == 1
    assert settled["env_steps_dropped"] == 0  # rounds end with every request back: none in flight to drop
    assert settled["num_env_runner_restarts"] == 0  # joining and leaving are no restarts
    iterations = [r["iteration"] for r in _rows(out)]
    assert iterations == list(range(1, len(iterations) + 1))

    # the coordinator got the same rows, and the stop request through the link
    info = client.stop(job, wait=True, timeout=120)
    assert info["stage"] == "STOPPED" and info["last_checkpoint"].endswith(
        f"checkpoint_{info['iteration']:08d}.ftrl")
    reported = list(client.results(job, follow=False))
    assert [r["iteration"] for r in reported] == [r["iteration"] for r in _rows(out)]
    assert [r["num_env_runners"] for r in reported] == [r["num_env_runners"] for r in _rows(out)]


def test_a_drained_driver_checkpoints_and_its_next_incarnation_goes_on(make_cluster, tmp_path):
    cluster = make_cluster(slots=4, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    out = tmp_path / "run"
    job = client.submit(JOB, job_id="dr", output_dir=str(out))
    wait_until(lambda: len(_rows(out)) >= 3, timeout=120, what="three iterations")
    driver = client.actor("dr/algorithm")
    os.kill(driver["pid"], signal.SIGTERM)  # the actor drains: __ftrl_drain__, then it exits
    wait_until(lambda: client.actor("dr/algorithm")["incarnation"] > driver["incarnation"]
               and client.actor("dr/algorithm")["state"] == "ALIVE", timeout=60, what="the driver's restart")
    drained_at = max(int(p.stem.split("_")[1]) for p in (out / "checkpoints").glob("checkpoint_*.ftrl"))
    assert drained_at >= 3  # the drain's checkpoint (the periodic interval is 1000)
    wait_until(lambda: len(_rows(out)) >= drained_at + 3, timeout=60, what="iterations after the restart")
    info = client.job_status(job)
    assert info["stage"] == "RUNNING" and info["driver_incarnation"] > driver["incarnation"]
    assert not (out / "result.json").exists()  # the job never ended
    runner = client.actor("dr/env_runner/0")
    assert runner["incarnation"] == 1 and runner["state"] == "ALIVE"  # re-attached, not restarted
    info = client.stop(job, wait=True, timeout=120)
    assert info["stage"] == "STOPPED"
    iterations = [r["iteration"] for r in _rows(out)]
    assert iterations == list(range(1, len(iterations) + 1))  # resumed where the drain left it
    result = json.loads((out / "result.json").read_text())
    assert result["restored_from"].endswith("driver_state.ftrl")  # the newest state: the drained iteration's
    assert result["result"]["num_env_runner_restarts"] == 0
