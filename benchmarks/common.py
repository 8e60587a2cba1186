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
