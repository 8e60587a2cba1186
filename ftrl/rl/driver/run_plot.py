"""`ftrl plot RUN_DIR`: a PNG of one run's curves from its metrics.jsonl, as `ftrl tune
plot` draws an experiment's.

Three panels over env steps: the return (the 100-episode mean with its min-max band,
and the evaluation return where the run evaluated), the mean episode length, and env
steps per second of each iteration. Vertical lines mark where the run's env runners
restarted (`num_env_runner_restarts` went up), where learners restarted
(`num_learner_restarts`), and where the driver resumed from a state
(`num_driver_resumes`: a killed driver, a `--resume`). matplotlib is imported here only
(`pip install 'ftrl[plot]'`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftrl.rl.driver.metrics import MetricsLog

#: (row counter, label, color, line style) of what a vertical line marks
MARKS = (
    ("num_env_runner_restarts", "env runner restart", "tab:red", ":"),
    ("num_learner_restarts", "learner restart", "tab:purple", ":"),
    ("num_driver_resumes", "driver resumed", "black", "--"),
)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def events(rows: list[dict[str, Any]], counter: str) -> list[float]:
    """The env steps of the rows where `counter` went up from the row before."""
    out, before = [], None
    for row in rows:
        value = _num(row.get(counter))
        if value is None:
            continue
        if before is not None and value > before:
            out.append(float(row.get("env_steps_sampled") or 0))
        before = value
    return out


def plot_run(run_dir: Path, out: Path) -> Path:
    """Write the run's curves to `out` (PNG); the path. ValueError when no row has a number."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = sorted((r for r in MetricsLog(run_dir / "metrics.jsonl").read() if isinstance(r.get("iteration"), int)),
                  key=lambda r: r["iteration"])
    if not rows:
        raise ValueError(f"{run_dir / 'metrics.jsonl'} has no metrics rows yet")
    x = [float(r.get("env_steps_sampled") or 0) for r in rows]
    fig = Figure(figsize=(12, 9), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ret_ax, len_ax, rate_ax = fig.subplots(3, 1, sharex=True)
    last = rows[-1]
    fig.suptitle(f"{run_dir.name}: {len(rows)} iterations, {int(x[-1]):,} env steps, "
                 f"return {_fmt(last.get('episode_return_mean'))}", fontsize=12)

    def series(key: str, source: list[dict[str, Any]] = rows) -> tuple[list[float], list[float]]:
        pts = [(float(r.get("env_steps_sampled") or 0), _num(r.get(key))) for r in source]
        kept = [(a, b) for a, b in pts if b is not None]
        return [a for a, _ in kept], [b for _, b in kept]

    xs, mean = series("episode_return_mean")
    ret_ax.plot(xs, mean, color="tab:blue", lw=1.8, label="episode return (mean of 100)")
    lo_x, lo = series("episode_return_min")
    hi_x, hi = series("episode_return_max")
    if lo and len(lo) == len(hi) == len(lo_x) and lo_x == hi_x:
        ret_ax.fill_between(lo_x, lo, hi, color="tab:blue", alpha=0.15, lw=0, label="min-max")
    evaluated = [r for r in rows if isinstance(r.get("evaluation"), dict)]
    ev_pts = [(float(r.get("env_steps_sampled") or 0), _num(r["evaluation"].get("episode_return_mean")))
              for r in evaluated]
    ev_pts = [(a, b) for a, b in ev_pts if b is not None]
    if ev_pts:
        ret_ax.plot([a for a, _ in ev_pts], [b for _, b in ev_pts], "o-", color="tab:green", ms=4, lw=1.2,
                    label="evaluation return")
    ret_ax.set_ylabel("return")
    lx, length = series("episode_len_mean")
    len_ax.plot(lx, length, color="tab:orange", lw=1.6)
    len_ax.set_ylabel("episode length (mean)")
    rates = [(float(r.get("env_steps_sampled") or 0),
              (_num(r.get("env_steps_sampled_this_iter")) or 0.0) / t)
             for r in rows if (t := _num(r.get("time_this_iter_s"))) and t > 0]
    rate_ax.plot([a for a, _ in rates], [b for _, b in rates], color="tab:gray", lw=1.2)
    rate_ax.set_ylabel("env steps / s")
    rate_ax.set_xlabel("env steps sampled")
    labelled: set[str] = set()
    for counter, label, color, style in MARKS:
        for at in events(rows, counter):
            for ax in (ret_ax, len_ax, rate_ax):
                ax.axvline(at, color=color, ls=style, lw=1.2,
                           label=label if ax is ret_ax and label not in labelled else None)
            labelled.add(label)
    for ax in (ret_ax, len_ax, rate_ax):
        ax.grid(alpha=0.3)
    ret_ax.legend(loc="lower right", fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp)
    tmp.replace(out)
    return out


def _fmt(value: Any) -> str:
    number = _num(value)
    return "-" if number is None else f"{number:.1f}"
