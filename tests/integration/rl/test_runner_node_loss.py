"""A worker SIGKILLed during training: its env runners move to the other node, training
goes on, and the restart count is what the runtime reports (one per move), not the
incarnation jump of a moved actor (a whole local-restart range)."""

from __future__ import annotations

import os
import signal

from ftrl.config import load_job
from tests.cluster import REPO, wait_until

CARTPOLE_JOB = REPO / "examples" / "cartpole_ppo.toml"


def _runners(client, job: str) -> list[dict]:
    return [a for a in client.actors() if a["name"].startswith(f"{job}/env_runner/")]


def test_worker_killed_during_training_counts_each_moved_runner_once(make_cluster):
    cluster = make_cluster(workers=2, slots=4)
    client = cluster.client()
    config = load_job(CARTPOLE_JOB).config
    config.env_runners(num_env_runners=4).debugging(seed=0)
    algo = config.build(client=client, job_name="moved")
    try:
        for _ in range(3):
            algo.train()
        by_node: dict[str, list[str]] = {}
        for a in _runners(client, "moved"):
            by_node.setdefault(a["node_id"], []).append(a["name"])
        victim = max(by_node, key=lambda n: len(by_node[n]))
        moved = set(by_node[victim])
        assert moved and len(by_node) <= 2
        os.kill(cluster.worker_procs[victim].pid, signal.SIGKILL)

        def all_back_elsewhere() -> bool:
            algo.train()
            runners = {a["name"]: a for a in _runners(client, "moved")}
            return (algo.env_runner_group.num_healthy == 4
                    and all(runners[n]["node_id"] != victim and runners[n]["state"] == "ALIVE" for n in moved))

        wait_until(all_back_elsewhere, timeout=90, interval=0.0, what="runners moved off the killed worker")
        result = algo.train()
    finally:
        algo.stop()
    runtime_restarts = sum(a["restarts"] for a in _runners(client, "moved"))
    assert runtime_restarts >= len(moved)
    assert result["num_env_runner_restarts"] == runtime_restarts, (result["num_env_runner_restarts"], runtime_restarts)
    assert result["num_env_runner_restarts"] < 4 * len(moved)  # not an incarnation jump (1000s)
    assert result["num_env_runner_failures"] >= len(moved)


def test_a_one_worker_cluster_never_excludes_its_only_node(make_cluster):
    """Exclusion moves actors to other nodes; a one-worker local cluster has none, so by
    default it never excludes (chaos at one kill per second would otherwise stop a long
    run after max_node_failures kills). Two workers keep the limit."""
    one = make_cluster(workers=1)
    assert one.client().cluster_info()["max_node_failures"] == -1
    two = make_cluster(workers=2)
    assert two.client().cluster_info()["max_node_failures"] == 100
