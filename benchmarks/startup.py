"""`ftrl train` start-up time and the memory of its embedded local cluster.

Prints ONE JSON object. Each run starts

    python -m ftrl train --env CartPole-v1 --num-env-runners 2 --stop-iters I --output TMP --quiet

(the embedded cluster: coordinator, worker with warm spares, the driver actor, 2 env
runner actors) and measures the seconds from the command's start to its first result
row (iteration 1 in TMP/metrics.jsonl, written by the driver when the iteration ends;
the seconds of that first iteration itself are reported beside it). Once iteration 3
is written it reads the PSS (/proc/PID/smaps_rollup) of every process in the command's
process tree, named by role (its process title / command line), the CPU seconds each
used so far, and whether torch is mapped in it (libtorch in /proc/PID/maps).

    python benchmarks/startup.py [--runs 3] [--stop-iters 8] [--compare DIR]

`--compare DIR` runs another checkout's ftrl (e.g. `git archive HEAD | tar -x -C DIR`)
in turns with this one (this, other, this, other...), so both see the same load.

Targets (issue 10): first iteration < 3 s; summed PSS < 600 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, emit

#: Longest one run may take before it is killed (a hung start-up is a failed run).
RUN_TIMEOUT_S = 120.0
#: The iteration at which memory is read (after the first iterations).
PSS_AT_ITERATION = 3


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants (by parent pid in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _ppid(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    out, todo = [], [root]
    while todo:  # a tree: every pid is visited once
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def role(pid: int, root: int) -> str:
    """A process's role in the local cluster, from its title / command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    words = [a.decode(errors="replace") for a in argv if a]
    line = " ".join(words)
    if pid == root:
        return "ftrl train"
    if line.startswith("ftrl-actor-spare"):
        return "spare"
    if line.startswith("ftrl-actor "):
        name = line.split(" ", 1)[1].strip()
        _, _, rest = name.partition("/")
        return rest or name
    for sub in ("coordinator", "worker"):
        if sub in words and "ftrl" in words:
            return sub
    if "ftrl.rl.sampling.sub_env" in words:
        return "sub_env"
    return line[:60] or "?"


def memory_of(pid: int) -> dict[str, Any] | None:
    """PSS / RSS in MB, CPU seconds used so far and whether libtorch is mapped; None if
    the process is gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        maps = Path(f"/proc/{pid}/maps").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    cpu_s = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    kb = {}
    for line in rollup.splitlines():
        key, _, value = line.partition(":")
        if key in ("Pss", "Rss"):
            kb[key] = int(value.split()[0])
    return {"pss_mb": round(kb.get("Pss", 0) / 1024, 1), "rss_mb": round(kb.get("Rss", 0) / 1024, 1),
            "cpu_s": round(cpu_s, 2), "torch": "libtorch" in maps}


def cluster_memory(root: int) -> dict[str, Any]:
    """PSS of every process of the command's tree, by role, and their sum."""
    procs = []
    for pid in process_tree(root):
        mem = memory_of(pid)
        if mem is not None:
            procs.append({"pid": pid, "role": role(pid, root), **mem})
    procs.sort(key=lambda p: p["role"])
    return {
        "pss_total_mb": round(sum(p["pss_mb"] for p in procs), 1),
        "cpu_total_s": round(sum(p["cpu_s"] for p in procs), 2),
        "processes": len(procs),
        "with_torch": [p["role"] for p in procs if p["torch"]],
        "by_process": procs,
    }


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            break  # a line still being written
    return rows


def one_run(stop_iters: int, repo: str = ROOT) -> dict[str, Any]:
    """Start `ftrl train` (the ftrl of `repo`), time its first row, read memory at
    PSS_AT_ITERATION, let it end."""
    out = Path(tempfile.mkdtemp(prefix="ftrl-startup-"))
    cmd = [sys.executable, "-m", "ftrl", "train", "--env", "CartPole-v1", "--num-env-runners", "2",
           "--stop-iters", str(stop_iters), "--output", str(out / "run"), "--quiet"]
    env = dict(os.environ)
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    metrics = out / "run" / "metrics.jsonl"
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first_s: float | None = None
    memory: dict[str, Any] | None = None
    deadline = t0 + RUN_TIMEOUT_S
    try:
        while proc.poll() is None and time.perf_counter() < deadline:
            rows = _rows(metrics)
            if rows and first_s is None:
                first_s = time.perf_counter() - t0
            if len(rows) >= PSS_AT_ITERATION and memory is None:
                memory = cluster_memory(proc.pid)
            if memory is not None:
                break
            time.sleep(0.005 if first_s is None else 0.05)
        _, err = proc.communicate(timeout=max(1.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    rows = _rows(metrics)
    shutil.rmtree(out, ignore_errors=True)
    if first_s is None or proc.returncode != 0:
        raise SystemExit(f"ftrl train failed (code {proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    return {
        "first_iteration_s": round(first_s, 3),
        "iteration_1_time_s": round(float(rows[0].get("time_s", 0.0)), 3) if rows else None,
        "exit_code": proc.returncode,
        "memory": memory,
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median / max of the runs' start-up seconds and PSS sums, the last run's breakdown."""
    firsts = [r["first_iteration_s"] for r in runs]
    totals = [r["memory"]["pss_total_mb"] for r in runs if r["memory"]]
    return {
        "first_iteration_s": {"median": round(statistics.median(firsts), 3), "max": round(max(firsts), 3),
                              "all": firsts},
        "iteration_1_time_s": [r["iteration_1_time_s"] for r in runs],
        "pss_total_mb": {"median": round(statistics.median(totals), 1) if totals else None,
                         "max": max(totals) if totals else None, "all": totals},
        "load_avg_1m_at_start": [r["load_avg_1m"] for r in runs],
        "memory_last_run": next((r["memory"] for r in reversed(runs) if r["memory"]), None),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stop-iters", type=int, default=8)
    ap.add_argument("--compare", metavar="DIR", help="another checkout, run in turns with this one")
    args = ap.parse_args()
    repos = [ROOT] + ([str(Path(args.compare).resolve())] if args.compare else [])
    runs: dict[str, list[dict[str, Any]]] = {repo: [] for repo in repos}
    for _ in range(args.runs):
        for repo in repos:
            load = os.getloadavg()[0]
            runs[repo].append({**one_run(max(args.stop_iters, PSS_AT_ITERATION + 1), repo),
                               "load_avg_1m": round(load, 2)})
            time.sleep(1.0)  # let the last run's processes go
    result: dict[str, Any] = {
        "benchmark": "startup",
        "what": "`ftrl train --env CartPole-v1 --num-env-runners 2` (embedded local cluster): seconds "
                "from the command to its first result row, and PSS of every process of the cluster "
                f"at iteration {PSS_AT_ITERATION}",
        "runs": args.runs,
        "target_first_iteration_s": 3.0,
        "target_pss_total_mb": 600,
        **summarize(runs[ROOT]),
    }
    if args.compare:
        result["compare"] = {"repo": repos[1], **summarize(runs[repos[1]])}
    emit(result)


if __name__ == "__main__":
    main()
