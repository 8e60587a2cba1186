"""The `ftrl` program against a running cluster: status (table and JSON) and bad options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster import running


def _ftrl() -> list[str]:
    script = Path(sys.executable).parent / "ftrl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ftrl"]


def run_ftrl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTRL_")}
    return subprocess.run([*_ftrl(), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def populated(shared_cluster):
    c = shared_cluster.client()
    c.create_actor("tests.actors:Counter", name="job/algorithm")
    c.create_actor("tests.actors:Counter", name="job/env_runner/0", max_restarts=3)
    with pytest.raises(Exception):  # noqa: B017 (any start error; it leaves a DEAD record)
        c.create_actor("tests.actors:BadInit", name="broken")
    return shared_cluster


def test_status_table(populated):
    cl = populated
    proc = run_ftrl("status", "--coordinator", cl.address, "--token-file", str(cl.token_file))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"coordinator {cl.address}" in out and "2/2 nodes alive, 3 actors" in out
    for word in ("NODE", "local-0", "local-1", "ACTOR", "job/algorithm", "job/env_runner/0",
                 "tests.actors:Counter", "broken", "DEAD", "BadInit refuses to start"):
        assert word in out
    alive_rows = [line for line in out.splitlines() if line.startswith("job/")]
    assert len(alive_rows) == 2 and all(" ALIVE " in row for row in alive_rows)


def test_status_json(populated):
    cl = populated
    proc = run_ftrl("status", "--json", "--coordinator", cl.address, "--token-file", str(cl.token_file))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) >= {"cluster", "nodes", "actors"}
    assert data["cluster"]["heartbeat_timeout_s"] == cl.heartbeat_timeout
    nodes = {n["node_id"]: n for n in data["nodes"]}
    assert set(nodes) == {"local-0", "local-1"}
    for n in nodes.values():
        assert {"node_id", "address", "state", "slots", "actors"} <= set(n)
        assert n["state"] == "ALIVE" and n["slots"] == 4 and n["pid"] == cl.worker_procs[n["node_id"]].pid
    actors = {a["name"]: a for a in data["actors"]}
    assert set(actors) == {"job/algorithm", "job/env_runner/0", "broken"}
    for a in actors.values():
        assert {"name", "class_path", "node_id", "pid", "state", "restarts", "incarnation"} <= set(a)
    runner = actors["job/env_runner/0"]
    assert runner["state"] == "ALIVE" and runner["pid"] > 0 and runner["incarnation"] == 1
    assert runner["max_restarts"] == 3 and runner["node_id"] in nodes
    assert runner["name"] in nodes[runner["node_id"]]["actors"]
    assert actors["broken"]["state"] == "DEAD" and actors["broken"]["error_type"] == "RuntimeError"

    proc = run_ftrl("status", "--json", "--prefix", "job/", "--coordinator", cl.address,
                    "--token-file", str(cl.token_file))
    assert sorted(a["name"] for a in json.loads(proc.stdout)["actors"]) == ["job/algorithm", "job/env_runner/0"]


def test_status_errors(shared_cluster):
    cl = shared_cluster
    proc = run_ftrl("status", "--coordinator", cl.address)
    assert proc.returncode == 1 and "missing cluster token" in proc.stderr
    proc = run_ftrl("status", "--coordinator", "127.0.0.1:1", "--token-file", str(cl.token_file))
    assert proc.returncode == 1 and "127.0.0.1:1" in proc.stderr and "unreachable" in proc.stderr
    proc = run_ftrl("status", "--coordinator", cl.address, "--token-file", str(cl.state_dir / "nope"))
    assert proc.returncode == 2 and "cannot read token file" in proc.stderr


def test_bad_server_options(shared_cluster, tmp_path):
    cl = shared_cluster
    token = ["--token-file", str(cl.token_file)]
    proc = run_ftrl("coordinator", "--port", str(cl.port), "--host", "127.0.0.1", *token, timeout=30)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{cl.port}" in proc.stderr
    proc = run_ftrl("coordinator", "--port", "0", "--heartbeat-interval", "5", "--heartbeat-timeout", "1")
    assert proc.returncode == 2 and "--heartbeat-interval must be smaller" in proc.stderr
    proc = run_ftrl("coordinator", "--host", "0.0.0.0", "--port", "0")
    assert proc.returncode == 2 and "without a cluster token" in proc.stderr
    proc = run_ftrl("worker", "--coordinator", "no-port-here", "--log-dir", str(tmp_path), *token)
    assert proc.returncode == 2 and "HOST:PORT" in proc.stderr
    assert running(cl.coordinator_proc)


@pytest.mark.parametrize(("address", "words"), [
    ("no-such-host.invalid:6380", "does not resolve"),
    ("127.0.0.1:1", "nothing listens on that port"),
])
def test_worker_gives_up_on_a_coordinator_it_cannot_join(tmp_path, address, words):
    """A worker that never joined retries for --connect-timeout, then exits 1 saying why
    (under systemd or srun it is then restarted by the launcher)."""
    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    t0 = time.monotonic()
    proc = run_ftrl("worker", "--coordinator", address, "--connect-timeout", "1.5",
                    "--log-dir", str(tmp_path / "logs"), "--token-file", str(token), timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert f"could not join the coordinator at {address}" in proc.stderr and words in proc.stderr
    assert "--connect-timeout" in proc.stderr and "Traceback" not in proc.stderr
    assert took < 30  # bounded: not a retry for ever


def test_train_finds_user_code_in_the_directory_it_runs_in(tmp_path):
    """An env and callbacks named by import path from a module in the working directory
    (as `python -m` finds it): found by `ftrl train` and by the runner actors of its
    embedded cluster."""
    (tmp_path / "my_project_envs.py").write_text(
        "import gymnasium as gym\n\n"
        "class Corridor(gym.Env):\n"
        "    def __init__(self, config):\n"
        "        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,))\n"
        "        self.action_space = gym.spaces.Discrete(2)\n"
        "        self.length = int(config.get('length', 5))\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        self.pos = 0\n"
        "        return [0.0], {}\n"
        "    def step(self, action):\n"
        "        self.pos += 1\n"
        "        done = self.pos >= self.length\n"
        "        return [self.pos / self.length], float(done), done, False, {}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTRL_") and k != "PYTHONPATH"}
    proc = subprocess.run(
        [*_ftrl(), "train", "--env", "my_project_envs:Corridor", "--set", "env_config={length=4}",
         "--num-env-runners", "1", "--stop-iters", "2", "--output", str(tmp_path / "run"), "--quiet"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2] and rows[-1]["episode_len_mean"] == 4
    assert rows[-1]["num_healthy_env_runners"] == 1
