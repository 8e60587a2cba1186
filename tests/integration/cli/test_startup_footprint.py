"""What `ftrl train` loads where, seen in the real processes (/proc/PID/maps): torch only
in the driver actor, never in the `ftrl train` process, the coordinator, the worker,
the env runners (numpy inference) or the warm spares. Also: the embedded cluster
starts its coordinator on another port when the one it picked is taken."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

from ftrl.client import cluster as cluster_mod
from tests.cluster import new_cluster, running_train, wait_until


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _tree(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(_children(pid))
    return out


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _has_torch(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_torch_is_loaded_only_in_the_driver_actor(tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "ftrl", "train", "--env", "CartPole-v1", "--num-env-runners", "2",
            "--stop-iters", "100000", "--output", str(out), "--job-name", "lean", "--quiet"]
    with running_train(argv) as proc:
        wait_until(lambda: (out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text().count("\n") >= 1,
                   timeout=120, what="the first iteration")
        # the pool refills its spares after the runners took two: wait for them too
        wait_until(lambda: sum(_title(p) == "ftrl-actor-spare" for p in _tree(proc.pid)) >= 2,
                   timeout=60, what="two warm spares")
        procs = {pid: _title(pid) for pid in _tree(proc.pid)}
        torch = {title for pid, title in procs.items() if _has_torch(pid)}
        titles = sorted(procs.values())
        assert torch == {"ftrl-actor lean/algorithm"}, titles
        assert {"ftrl-actor lean/env_runner/0", "ftrl-actor lean/env_runner/1"} <= set(titles)
        assert any(" coordinator " in t for t in titles) and any(" worker " in t for t in titles)
        assert not _has_torch(proc.pid)  # the `ftrl train` process itself
        os.killpg(proc.pid, signal.SIGINT)  # stop after this iteration
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert json.loads((out / "result.json").read_text())["stop_reason"] == "stopped"


def test_a_taken_picked_port_is_replaced(monkeypatch, tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks = iter([taken.getsockname()[1]])
    real = cluster_mod.free_port
    monkeypatch.setattr(cluster_mod, "free_port", lambda host="127.0.0.1": next(picks, None) or real(host))
    cl = new_cluster(workers=1, slots=1, state_dir=str(tmp_path / "c"))
    try:
        cl.launch()  # coordinator and worker at once, on the picked (taken) port
        cl.wait_coordinator()
        cl.wait_nodes(list(cl.worker_procs))
        assert cl.port != taken.getsockname()[1]
        assert [n["state"] for n in cl.client().nodes()] == ["ALIVE"]
        assert cl.coordinator_proc.poll() is None
    finally:
        cl.stop()
        taken.close()


def test_a_job_that_fails_its_check_stops_the_cluster_started_beside_it(tmp_path, capsys):
    from ftrl.cli import build_parser
    from ftrl.cli.train import run_train

    out = tmp_path / "never"
    args = build_parser().parse_args(["train", "--env", "NoSuchEnv-v9", "--num-env-runners", "2",
                                      "--stop-iters", "1", "--output", str(out), "--quiet"])
    assert run_train(args) == 2
    assert "cannot make environment" in capsys.readouterr().err
    assert not out.exists()  # no output dir left for a job that never ran
    assert not [p for p in _children(os.getpid()) if "ftrl" in _title(p)]  # its processes are gone
