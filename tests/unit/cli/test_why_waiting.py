"""`ftrl status JOB` says why an actor of the job waits to start."""

from __future__ import annotations

from ftrl.cli.jobs import why_waiting

NODES = [{"node_id": "spot-1", "state": "ALIVE", "resources": {"cpu": 4.0, "spot": 4.0}},
         {"node_id": "head", "state": "LOST", "resources": {"cpu": 2.0, "ondemand": 2.0}}]


def test_a_resource_no_alive_worker_offers_is_named():
    driver = {"name": "j/algorithm", "state": "PENDING", "resources": {"cpu": 0.0, "ondemand": 0.5}}
    assert "no ALIVE worker offers ondemand=0.5" in why_waiting(driver, NODES)  # the LOST head does not count
    runner = {"name": "j/env_runner/0", "state": "RESTARTING", "resources": {"cpu": 8.0, "spot": 1.0}}
    assert "no ALIVE worker offers cpu=8" in why_waiting(runner, NODES)
    small = {"name": "j/env_runner/1", "state": "PENDING", "resources": {"cpu": 1.0, "spot": 1.0}}
    assert why_waiting(small, NODES) == "waits for room (cpu=1, spot=1) on the ALIVE workers"
    assert why_waiting({**small, "state": "ALIVE"}, NODES) is None
