"""Shared bits of the benchmark scripts: machine facts and JSON output."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import grpc

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
    }


def summary(values: list[float], digits: int = 4) -> dict[str, float]:
    """median / p90 / min / max / mean of `values`."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "n": len(values),
        "median": round(statistics.median(ordered), digits),
        "p90": round(p90, digits),
        "min": round(ordered[0], digits),
        "max": round(ordered[-1], digits),
        "mean": round(statistics.fmean(ordered), digits),
    }


def paired_costs(off: list[float], on: list[float]) -> dict[str, Any]:
    """Rates of one arm with a feature off and on, in pairs of neighbouring chunks: the
    medians and the paired cost (1 - on/off) with its quartiles."""
    paired = [1 - b / a for a, b in zip(off, on, strict=True)]
    return {"steps_per_s_without": round(statistics.median(off)),
            "steps_per_s_with": round(statistics.median(on)),
            "cost_paired_median": round(statistics.median(paired), 4),
            "cost_paired_quartiles": [round(q, 4) for q in statistics.quantiles(paired, n=4)]}


def emit(result: dict[str, Any]) -> None:
    """Print the one JSON object a benchmark script promises."""
    result.setdefault("machine", machine())
    print(json.dumps(result, indent=2))


def env_with_repo() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def filesystem(path: str) -> dict[str, str]:
    """The mount holding `path` (longest mount-point prefix in /proc/mounts)."""
    best = ("", "", "")
    real = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[1]):
                best = (dev, mnt, fstype)
    return {"device": best[0], "mount": best[1], "type": best[2]}


def read_rows(run_dir: Any) -> list[dict[str, Any]]:
    """The rows of a run directory's metrics.jsonl (none if it is not there yet; a line
    being written is skipped)."""
    from pathlib import Path

    path = Path(run_dir) / "metrics.jsonl"
    out: list[dict[str, Any]] = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    """`predicate()`'s first truthy value, polled every 50 ms; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


def first_reach(rows: list[dict[str, Any]], bound: float) -> int | None:
    """The env steps of the first row whose 100-episode mean return reached `bound`."""
    for row in rows:
        value = row.get("episode_return_mean")
        if isinstance(value, int | float) and value >= bound:
            return int(row["env_steps_sampled"])
    return None
