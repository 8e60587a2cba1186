"""What an `ftrl tune` experiment looks like from its directory: the population table that
`ftrl tune status` prints, its JSON form, and a PNG of the run (`ftrl tune plot`).

Everything here reads files only (EXPDIR/experiment.json, EXPDIR/lineage.jsonl and each
trial's metrics.jsonl), so it works on a live experiment, a finished one, or one whose tuner
crashed. The tuner writes experiment.json atomically; the .jsonl files are appended to, so a
torn last line is expected after a crash and is skipped with a warning, never raised.

No torch and no cluster imports: matplotlib is imported inside `plot_experiment` only
(the `plot` extra: pip install 'ftrl[plot]').
"""

from __future__ import annotations

import io
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ftrl.tune.experiment import (
    EXPERIMENT_FILE,
    FINAL_EXPERIMENT_STATUSES,
    FORMAT,
    ExperimentStatus,
    TrialStatus,
    read_jsonl,
    read_lineage,
    row_key,
    row_value,
)
from ftrl.util.files import atomic_write_bytes
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
DEFAULT_PLOT_NAME = "pbt.png"


# --------------------------------------------------------------------------- reading


def read_experiment(expdir: str | Path) -> dict[str, Any]:
    """EXPDIR/experiment.json, parsed. ConfigError if EXPDIR is not an experiment."""
    expdir = Path(expdir)
    if not expdir.is_dir():
        raise ConfigError(f"{expdir} is not an ftrl tune experiment (no such directory)")
    path = expdir / EXPERIMENT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{expdir} is not an ftrl tune experiment (no {EXPERIMENT_FILE})") from None
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    try:
        experiment = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e}); is {expdir} an ftrl tune experiment?") from None
    if not isinstance(experiment, dict):
        raise ConfigError(f"{path} does not hold a JSON object; is {expdir} an ftrl tune experiment?")
    fmt = experiment.get("format", FORMAT)
    if isinstance(fmt, int) and fmt > FORMAT:
        log.warning("%s has format %s, newer than this ftrl reads (%s); fields may be missing", path, fmt, FORMAT)
    return experiment


def trial_dir(expdir: str | Path, trial: Mapping[str, Any]) -> Path:
    """The trial's folder: its recorded output_dir, or EXPDIR/<trial_id> when that path does
    not exist (the experiment was moved or copied from another machine)."""
    out = trial.get("output_dir")
    if isinstance(out, str) and out and Path(out).is_dir():
        return Path(out)
    return Path(expdir) / str(trial.get("trial_id", ""))


def read_trial_rows(expdir: str | Path, trial: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The trial's metrics.jsonl rows in file order ([] if it has none yet)."""
    if not trial.get("trial_id") and not trial.get("output_dir"):
        return []
    return read_jsonl(trial_dir(expdir, trial) / METRICS_FILE)


# --------------------------------------------------------------------------- summary


def _num(v: Any) -> float | None:
    """`v` as a finite float, or None (missing, null, NaN, a string, a bool)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None else None


def _jsonable(v: Any) -> Any:
    """NaN/inf as None, so `json.dumps(..., allow_nan=False)` works on the summary."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return v


def _trials(experiment: Mapping[str, Any]) -> list[dict[str, Any]]:
    trials = experiment.get("trials") or {}
    if isinstance(trials, dict):
        out = []
        for tid, t in trials.items():
            if isinstance(t, dict):
                out.append({"trial_id": tid, **t})
        return out
    if isinstance(trials, list):  # tolerate a list form
        return [t for t in trials if isinstance(t, dict)]
    return []


def _param_keys(experiment: Mapping[str, Any], trials: list[dict[str, Any]]) -> list[str]:
    keys = experiment.get("param_keys")
    if isinstance(keys, list) and keys:
        return [str(k) for k in keys]
    seen: dict[str, None] = {}
    for t in trials:
        cfg = t.get("config")
        if isinstance(cfg, dict):
            seen.update(dict.fromkeys(map(str, cfg)))
    return list(seen)


def _rank_key(mode: str, metric: float | None, index: Any) -> tuple:
    idx = index if isinstance(index, int) and not isinstance(index, bool) else 1 << 30
    if metric is None:
        return (1, 0.0, idx)
    return (0, metric if mode == "min" else -metric, idx)


def experiment_summary(
    experiment: Mapping[str, Any],
    lineage: list[dict[str, Any]] | None = None,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """The experiment as JSON-able data (`ftrl tune status --json`): a header and one row per
    trial, best first by the metric (respecting mode; trials without a value last).

    `clones` counts the exploits where the trial was the target and `donated` those where it
    was the donor, from `lineage`; without a lineage, `clones` falls back to the trial's own
    num_exploits and `donated` is None (unknown)."""
    trials = _trials(experiment)
    metric = str(experiment.get("metric") or "")
    mode = "min" if experiment.get("mode") == "min" else "max"
    keys = _param_keys(experiment, trials)
    targets: Counter[str] = Counter()
    donors: Counter[str] = Counter()
    for e in lineage or ():
        if isinstance(e, dict):
            targets[str(e.get("target"))] += 1
            donors[str(e.get("donor"))] += 1

    rows = []
    for t in trials:
        tid = str(t.get("trial_id", ""))
        last = t.get("last_result") if isinstance(t.get("last_result"), dict) else {}
        cfg = t.get("config") if isinstance(t.get("config"), dict) else {}
        value = _num(last.get(metric)) if metric else None
        rows.append({
            "trial_id": tid,
            "index": t.get("index"),
            "status": str(t.get("status") or TrialStatus.PENDING),
            "iteration": _int(last.get("iteration")),
            "env_steps": _int(last.get("env_steps_sampled")),
            "time_s": _num(last.get("time_s")),
            "metric": value,
            "best_metric": _num(t.get("best_metric")),
            "config": {k: _jsonable(cfg.get(k)) for k in keys},
            "clones": targets[tid] if lineage is not None else _int(t.get("num_exploits")) or 0,
            "donated": donors[tid] if lineage is not None else None,
            "failures": _int(t.get("num_failures")) or 0,
            "preemptions": _int(t.get("num_preemptions")) or 0,
            "pauses": _int(t.get("num_pauses")) or 0,
            "node": str(t.get("node") or ""),
            "error": str(t.get("error") or ""),
        })
    rows.sort(key=lambda r: _rank_key(mode, r["metric"], r["index"]))

    started = _num(experiment.get("started_at"))
    updated = _num(experiment.get("updated_at"))
    status = str(experiment.get("status") or ExperimentStatus.PENDING)
    elapsed = updated - started if started is not None and updated is not None else None
    since_update = None
    if updated is not None and status not in FINAL_EXPERIMENT_STATUSES:
        since_update = max(0.0, (time.time() if now is None else now) - updated)
    scheduler = experiment.get("scheduler") if isinstance(experiment.get("scheduler"), dict) else {}
    counters = experiment.get("counters") if isinstance(experiment.get("counters"), dict) else {}
    best = next((r for r in rows if r["metric"] is not None), None)
    return _jsonable({
        "name": str(experiment.get("name") or ""),
        "status": status,
        "metric": metric,
        "mode": mode,
        "time_attr": experiment.get("time_attr"),
        "scheduler": str(scheduler.get("kind") or "?"),
        "param_keys": keys,
        "counters": {
            "num_exploits": _int(counters.get("num_exploits")) or 0,
            "num_donor_skips": _int(counters.get("num_donor_skips")) or 0,
            "num_preemptions": _int(counters.get("num_preemptions")) or 0,
            "num_trial_failures": _int(counters.get("num_trial_failures")) or 0,
            "num_pauses": _int(counters.get("num_pauses")) or 0,
        },
        "started_at": started,
        "updated_at": updated,
        "elapsed_s": elapsed,
        "since_update_s": since_update,
        "num_trials": len(rows),
        "trial_states": dict(Counter(r["status"] for r in rows)),
        "best": None if best is None else {"trial_id": best["trial_id"], "metric": best["metric"], "config": best["config"]},
        "trials": rows,
    })


# --------------------------------------------------------------------------- the table


def fmt_duration(seconds: float | None) -> str:
    """45s, 3m05s, 2h03m, 1d04h."""
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _fmt_count(v: int | None) -> str:
    """Steps at a glance: 9500, 48k, 123k, 1.23M, 4.5B."""
    if v is None:
        return "-"
    a = abs(v)
    if a < 10_000:
        return str(v)
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            q = v / div
            return f"{q:.3g}{suffix}" if abs(q) < 1000 else f"{q:.0f}{suffix}"
    return str(v)  # pragma: no cover


def _fmt_metric(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def fmt_param(v: Any, width: int = 12) -> str:
    """A hyperparameter compactly: floats to 3 significant digits, ints as they are."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        s = str(v) if abs(v) < 10**7 else f"{v:.3g}"
    elif isinstance(v, float):
        s = f"{v:.3g}"
    elif isinstance(v, str):
        s = v
    else:
        s = json.dumps(v, separators=(",", ":"), default=str)
    return s if len(s) <= width else s[: width - 1] + "…"


def _render(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Iterable[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(out).rstrip()

    return [line(headers), line("-" * w for w in widths), *(line(r) for r in rows)]


def population_table(
    experiment: Mapping[str, Any],
    lineage: list[dict[str, Any]] | None = None,
    *,
    now: float | None = None,
) -> str:
    """The population as fixed-width text, best trial first (what `ftrl tune status` prints).

    A header line (name, status, scheduler, counters, elapsed), a table with one row per trial
    (trial, status, iter, env steps, the metric's last value, best, the tuned hyperparameters'
    current values, clones, donated, failures, preemptions, pauses), then the best trial and any
    trial errors."""
    s = experiment_summary(experiment, lineage, now=now)
    c = s["counters"]
    head = (
        f"{s['name'] or '(unnamed)'}  {s['status']}  scheduler={s['scheduler']}  "
        f"metric={s['metric'] or '?'} ({s['mode']})  trials={s['num_trials']}"
    )
    states = "  ".join(f"{k.lower()}={v}" for k, v in sorted(s["trial_states"].items()))
    info = (
        f"exploits={c['num_exploits']}  donor_skips={c['num_donor_skips']}  "
        f"preemptions={c['num_preemptions']}  trial_failures={c['num_trial_failures']}  "
        f"pauses={c['num_pauses']}  elapsed={fmt_duration(s['elapsed_s'])}"
    )
    if s["since_update_s"] is not None:
        info += f"  (updated {fmt_duration(s['since_update_s'])} ago)"
    lines = [head, info + (f"  [{states}]" if states else ""), ""]

    keys = s["param_keys"]
    headers = ["trial", "status", "iter", "env steps", s["metric"] or "metric", "best", *keys,
               "clones", "donated", "failures", "preempt", "pauses"]
    right = set(range(2, len(headers)))  # numbers right-aligned
    body = []
    for r in s["trials"]:
        body.append([
            r["trial_id"],
            r["status"],
            "-" if r["iteration"] is None else str(r["iteration"]),
            _fmt_count(r["env_steps"]),
            _fmt_metric(r["metric"]),
            _fmt_metric(r["best_metric"]),
            *(fmt_param(r["config"].get(k)) for k in keys),
            str(r["clones"]),
            "-" if r["donated"] is None else str(r["donated"]),
            str(r["failures"]),
            str(r["preemptions"]),
            str(r["pauses"]),
        ])
    lines += _render(headers, body, right)
    if not body:
        lines.append("(no trials yet)")
    if s["best"] is not None:
        b = s["best"]
        cfg = ", ".join(f"{k}={fmt_param(v)}" for k, v in b["config"].items())
        lines += ["", f"best: {b['trial_id']}  {s['metric']}={_fmt_metric(b['metric'])}" + (f"  ({cfg})" if cfg else "")]
    errors = [r for r in s["trials"] if r["error"]]
    if errors:
        lines.append("")
        for r in errors:
            first = r["error"].strip().splitlines()[0] if r["error"].strip() else ""
            lines.append(f"{r['trial_id']} ({r['status']}): {first[:160]}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the plot


def _colors(n: int, matplotlib: Any) -> list[Any]:
    if n <= 10:
        cmap = matplotlib.colormaps["tab10"]
        return [cmap(i) for i in range(n)]
    if n <= 20:
        cmap = matplotlib.colormaps["tab20"]
        return [cmap(i) for i in range(n)]
    cmap = matplotlib.colormaps["turbo"]
    return [cmap(0.05 + 0.9 * i / (n - 1)) for i in range(n)]


def _row_at(rows: list[dict[str, Any]], iteration: Any, start: int = 0) -> int | None:
    """The index of the first row from `start` whose iteration is `iteration`, else of the last
    row from `start` with a smaller iteration; None if neither."""
    it = _num(iteration)
    if it is None:
        return None
    before = None
    for i in range(start, len(rows)):
        ri = _num(rows[i].get("iteration"))
        if ri is None:
            continue
        if ri == it:
            return i
        if ri < it:
            before = i
    return before


def _y_at(rows: list[dict[str, Any]], i: int | None, metric: str) -> float | None:
    """The metric at row i, or the last finite value before it."""
    if i is None:
        return None
    for j in range(i, -1, -1):
        v = _num(row_value(rows[j], metric))
        if v is not None:
            return v
    return None


def _index_key(t: Mapping[str, Any]) -> tuple[int, str]:
    idx = t.get("index")
    return (idx if isinstance(idx, int) and not isinstance(idx, bool) else 1 << 30, str(t.get("trial_id", "")))


_EVENT_X = {"env_steps_sampled": "target_env_steps", "iteration": "target_iteration"}


def plot_experiment(
    expdir: str | Path,
    out: str | Path | None = None,
    x: str = "env_steps_sampled",
) -> Path:
    """Write a PNG of the experiment (default EXPDIR/pbt.png) and return its path.

    Left: each trial's metric over `x` (a metrics.jsonl key), one line per trial, and each
    exploit as a marker on the target's line where it was cloned, with a thin dashed line from
    the donor's checkpoint on the donor's line. Right: the lineage tree, one lane per trial over
    wall time since the start, an arrow from the donor's lane to the target's at each exploit,
    and each trial's last metric at the end of its lane."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'ftrl[plot]'") from None

    expdir = Path(expdir)
    x = row_key(x)  # Ray Tune's names too (training_iteration, ...)
    experiment = read_experiment(expdir)
    lineage = read_lineage(expdir)
    summary = experiment_summary(experiment, lineage)
    metric = summary["metric"]
    trials = sorted(_trials(experiment), key=_index_key)
    ids = [str(t.get("trial_id", "")) for t in trials]
    rows = {tid: read_trial_rows(expdir, t) for tid, t in zip(ids, trials, strict=True)}
    final = {r["trial_id"]: r for r in summary["trials"]}
    if any(rows.values()) and not any(x in r for rs in rows.values() for r in rs):
        have = sorted({k for rs in rows.values() for r in rs for k in r})
        raise ConfigError(f"no metrics row has {x!r}; choose x from: {', '.join(have)}")
    colors = dict(zip(ids, _colors(max(1, len(ids)), matplotlib), strict=False))
    out_path = Path(out) if out is not None else expdir / DEFAULT_PLOT_NAME

    height = max(4.8, 1.6 + 0.32 * len(ids))
    fig = Figure(figsize=(15, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax, tree = fig.subplots(1, 2, width_ratios=[3, 2])
    fig.suptitle(
        f"{summary['name'] or expdir.name}: {metric} ({summary['mode']}), "
        f"{summary['scheduler']}, {summary['status']}, {summary['counters']['num_exploits']} exploits",
        fontsize=12,
    )

    # Left: the metric curves.
    plotted = 0
    for tid in ids:
        pts = [(_num(row_value(r, x)), _num(row_value(r, metric))) for r in rows[tid]]
        pts = [(a, b) for a, b in pts if a is not None and b is not None]
        if not pts:
            continue
        last = final.get(tid, {}).get("metric")
        label = tid if last is None else f"{tid} ({last:.1f})"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colors[tid], lw=1.6, label=label)
        plotted += 1

    cursor: dict[str, int] = {}
    n_marked = 0
    for e in lineage:
        target, donor = str(e.get("target")), str(e.get("donor"))
        if target not in rows:
            continue
        trows = rows[target]
        ti = _row_at(trows, e.get("target_iteration"), cursor.get(target, 0))
        if ti is not None:
            cursor[target] = ti + 1
            tx = _num(trows[ti].get(x))
        else:
            tx = None
        if tx is None:
            tx = _num(e.get(_EVENT_X.get(x, ""))) if x in _EVENT_X else None
            if tx is None and x == row_key(summary["time_attr"]):
                tx = _num(e.get("target_time"))
        ty = _y_at(trows, ti, metric)
        if tx is None or ty is None:
            continue
        ax.plot([tx], [ty], marker="v", ms=8, color=colors[target], mec="black", mew=0.8, zorder=5, ls="none")
        n_marked += 1
        if donor in rows:
            di = _row_at(rows[donor], e.get("donor_checkpoint_iteration"))
            dx = _num(rows[donor][di].get(x)) if di is not None else None
            dy = _y_at(rows[donor], di, metric)
            if dx is not None and dy is not None:
                ax.plot([dx, tx], [dy, ty], ls="--", lw=1.0, color=colors[donor], alpha=0.9, zorder=4)
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    if plotted:
        handles, labels = ax.get_legend_handles_labels()
        if n_marked:
            handles.append(Line2D([], [], marker="v", color="gray", mec="black", ls="none", ms=8))
            labels.append("exploit (dashed: from donor)")
        ax.legend(handles, labels, fontsize=8, ncol=2 if len(labels) > 10 else 1, loc="best", framealpha=0.8)
    else:
        ax.text(0.5, 0.5, "no metrics yet", ha="center", va="center", transform=ax.transAxes, color="gray")

    # Right: the lineage tree, one lane per trial.
    started = summary["started_at"]
    times = [_num(e.get("time")) for e in lineage]
    use_wall = started is not None and lineage and all(t is not None for t in times)
    if use_wall:
        ev_x = [t - started for t in times]
        end = max([summary["elapsed_s"] or 0.0, *ev_x])
        tree.set_xlabel("wall time since start (s)")
    else:
        ev_x = [_num(e.get("target_time")) for e in lineage]
        ends = [_num(final.get(tid, {}).get("iteration")) for tid in ids]
        end = max([0.0, *(v for v in ev_x if v is not None), *(v for v in ends if v is not None)])
        if not lineage and started is not None and summary["elapsed_s"]:
            end = summary["elapsed_s"]
            tree.set_xlabel("wall time since start (s)")
        else:
            tree.set_xlabel(f"{summary['time_attr'] or 'iteration'} (target's)")
    end = end or 1.0
    lane = {tid: i for i, tid in enumerate(ids)}
    for tid in ids:
        y = lane[tid]
        st = final.get(tid, {}).get("status", TrialStatus.PENDING)
        waiting = st == TrialStatus.PENDING
        tree.plot([0, end], [y, y], color=colors[tid], lw=1 if waiting else 3,
                  ls=":" if waiting else "-", alpha=0.75, solid_capstyle="butt")
        v = final.get(tid, {}).get("metric")
        txt = " ".join(p for p in (_fmt_metric(v) if v is not None else "",
                                   st if st not in (TrialStatus.RUNNING, TrialStatus.TERMINATED) else "") if p) or "-"
        tree.text(end * 1.02, y, txt, va="center", ha="left", fontsize=8, color=colors[tid])
        if st == TrialStatus.ERROR:
            tree.plot([end], [y], marker="x", color="black", ms=8)
    for e, ex in zip(lineage, ev_x, strict=True):
        target, donor = str(e.get("target")), str(e.get("donor"))
        if ex is None or target not in lane or donor not in lane:
            continue
        tree.annotate("", xy=(ex, lane[target]), xytext=(ex, lane[donor]),
                      arrowprops={"arrowstyle": "-|>", "color": colors[donor], "lw": 1.2, "shrinkA": 2, "shrinkB": 2})
        tree.plot([ex], [lane[donor]], marker="o", ms=4, color=colors[donor])
    tree.set_yticks(range(len(ids)), ids, fontsize=8)
    tree.set_ylim(max(len(ids), 1) - 0.5, -0.5)
    tree.set_xlim(0, end * 1.18)
    tree.set_title("lineage (arrow: donor → target)" if lineage else "lineage (no exploits)", fontsize=10)
    tree.grid(True, axis="x", alpha=0.3)
    if not ids:
        tree.text(0.5, 0.5, "no trials yet", ha="center", va="center", transform=tree.transAxes, color="gray")

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(out_path, buf.getvalue(), sync_dir=False)
    return out_path
