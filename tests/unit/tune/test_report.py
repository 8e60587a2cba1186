"""ftrl.tune.report: reading an experiment directory, the population table, its JSON form and
the PNG, on synthetic experiments (torn .jsonl lines, a PENDING trial with no folder, FIFO)."""

from __future__ import annotations

import builtins
import json
import logging
import math
import struct
import sys
from pathlib import Path

import pytest

from ftrl.tune.report import (
    experiment_summary,
    fmt_param,
    plot_experiment,
    population_table,
    read_experiment,
    read_lineage,
    read_trial_rows,
)
from ftrl.wire.errors import ConfigError

T0 = 1764240000.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _curve(i: int, it: int) -> float:
    """Trial i's return at iteration it: trial 0 learns fastest."""
    return (4 - i) * 20.0 * it / (1 + 0.05 * it)


def make_pbt(root: Path, *, mode: str = "max", moved: bool = True) -> Path:
    """A 4-trial PBT run of 12 iterations (trial 3 cloned trial 0 twice, trial 2 cloned
    trial 1 once), plus a PENDING trial 4 with no folder. Trial 1's output_dir is an absolute
    path that does not exist (the experiment was moved): it is read from EXPDIR/<id>.
    lineage.jsonl and trial 0's metrics.jsonl end in a torn line."""
    exp = root / "pbt-cartpole"
    exp.mkdir(parents=True)
    sign = 1.0 if mode == "max" else -1.0
    exploits = {4: [(3, 0)], 8: [(3, 0), (2, 1)]}  # iteration -> (target, donor)
    configs = {i: {"lr": 0.001 * (1 + i) / 3, "entropy_coeff": 0.01 * (i + 1)} for i in range(4)}
    initial = {i: dict(c) for i, c in configs.items()}
    offset = dict.fromkeys(range(4), 0.0)
    rows: dict[int, list[dict]] = {i: [] for i in range(4)}
    lineage = []
    for it in range(1, 13):
        for i in range(4):
            ret = None if it == 1 else sign * (_curve(i, it) + offset[i])
            rows[i].append({"iteration": it, "env_steps_sampled": 4000 * it, "time_s": 1.7 * it,
                            "episode_return_mean": ret, "weights_version": it})
        for target, donor in exploits.get(it, []):
            new = {k: v * 1.2 for k, v in configs[donor].items()}
            lineage.append({
                "time": T0 + 2.0 * it + 0.5, "target": f"pbt-cartpole-{target}", "donor": f"pbt-cartpole-{donor}",
                "donor_checkpoint": f"/abs/{donor}/ckpt-{it}.ftrl", "donor_checkpoint_iteration": it,
                "donor_checkpoint_age_s": 0.3, "target_iteration": it, "target_time": it,
                "target_env_steps": 4000 * it, "old_config": configs[target], "new_config": new, "latency_s": 0.4,
            })
            configs[target] = new
            offset[target] += _curve(donor, it) - _curve(target, it)
    trials = {}
    for i in range(4):
        tid = f"pbt-cartpole-{i}"
        d = exp / tid
        d.mkdir()
        text = "".join(json.dumps(r) + "\n" for r in rows[i])
        if i == 0:
            text += '{"iteration": 13, "env_steps_sa'  # torn by a crash
        (d / "metrics.jsonl").write_text(text)
        rets = [r["episode_return_mean"] for r in rows[i] if r["episode_return_mean"] is not None]
        trials[tid] = {
            "trial_id": tid, "index": i, "status": "RUNNING" if i < 3 else "TERMINATED",
            "config": configs[i], "initial_config": initial[i],
            "output_dir": f"/nonexistent/elsewhere/{tid}" if (moved and i == 1) else str(d),
            "last_result": rows[i][-1], "best_metric": (max if mode == "max" else min)(rets),
            "num_exploits": sum(1 for e in lineage if e["target"] == tid), "num_failures": 1 if i == 2 else 0,
            "num_preemptions": 1 if i == 1 else 0, "error": "", "node": "node-a",
        }
    trials["pbt-cartpole-4"] = {
        "trial_id": "pbt-cartpole-4", "index": 4, "status": "PENDING",
        "config": {"lr": 3e-4, "entropy_coeff": 0.0}, "initial_config": {}, "output_dir": str(exp / "pbt-cartpole-4"),
        "num_exploits": 0, "num_failures": 0, "num_preemptions": 0, "error": "",
    }
    (exp / "experiment.json").write_text(json.dumps({
        "format": 1, "name": "pbt-cartpole", "status": "RUNNING", "metric": "episode_return_mean", "mode": mode,
        "time_attr": "iteration", "scheduler": {"kind": "pbt", "perturbation_interval": 4},
        "param_keys": ["lr", "entropy_coeff"], "trials": trials,
        "counters": {"num_exploits": 3, "num_donor_skips": 1, "num_preemptions": 1, "num_trial_failures": 1},
        "started_at": T0, "updated_at": T0 + 100.0,
    }))
    text = "".join(json.dumps(e) + "\n" for e in lineage) + '{"time": 1764240030.0, "target": "pbt-'
    (exp / "lineage.jsonl").write_text(text)
    return exp


def make_fifo(root: Path, n: int = 2, rows: bool = True) -> Path:
    exp = root / "fifo"
    exp.mkdir(parents=True)
    trials = {}
    for i in range(n):
        tid = f"fifo-{i}"
        if rows:
            (exp / tid).mkdir()
            (exp / tid / "metrics.jsonl").write_text("".join(
                json.dumps({"iteration": it, "env_steps_sampled": 1000 * it, "time_s": it,
                            "episode_return_mean": 10.0 * it * (i + 1)}) + "\n" for it in range(1, 6)))
        trials[tid] = {"trial_id": tid, "index": i, "status": "TERMINATED" if rows else "PENDING",
                       "config": {"lr": 0.01 / (i + 1)}, "output_dir": str(exp / tid),
                       **({"last_result": {"iteration": 5, "env_steps_sampled": 5000,
                                           "episode_return_mean": 50.0 * (i + 1)}} if rows else {})}
    (exp / "experiment.json").write_text(json.dumps({
        "format": 1, "name": "fifo", "status": "FINISHED", "metric": "episode_return_mean", "mode": "max",
        "time_attr": "iteration", "scheduler": {"kind": "fifo"}, "param_keys": ["lr"], "trials": trials,
        "counters": {}, "started_at": T0, "updated_at": T0 + 65.0,
    }))
    return exp


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _table_rows(table: str) -> list[list[str]]:
    """The table body: the lines after the dashes, up to the first blank line, split."""
    lines = table.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("---")) + 1
    out = []
    for ln in lines[start:]:
        if not ln.strip():
            break
        out.append(ln.split())
    return out


# --------------------------------------------------------------------------- reading


def test_read_experiment_errors(tmp_path):
    with pytest.raises(ConfigError, match="not an ftrl tune experiment"):
        read_experiment(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"is not an ftrl tune experiment \(no experiment.json\)"):
        read_experiment(tmp_path)
    (tmp_path / "experiment.json").write_text('{"name": "x", "trials": {')
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_experiment(tmp_path)
    (tmp_path / "experiment.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        read_experiment(tmp_path)
    (tmp_path / "experiment.json").write_text('{"name": "x"}')
    assert read_experiment(str(tmp_path)) == {"name": "x"}


def test_torn_lines_are_skipped_with_a_warning(tmp_path, caplog):
    exp = make_pbt(tmp_path)
    experiment = read_experiment(exp)
    with caplog.at_level(logging.WARNING, logger="ftrl.tune.report"):
        lineage = read_lineage(exp)
        rows0 = read_trial_rows(exp, experiment["trials"]["pbt-cartpole-0"])
    assert [(e["target"], e["donor"]) for e in lineage] == [
        ("pbt-cartpole-3", "pbt-cartpole-0"), ("pbt-cartpole-3", "pbt-cartpole-0"), ("pbt-cartpole-2", "pbt-cartpole-1")]
    assert [r["iteration"] for r in rows0] == list(range(1, 13))
    warned = [r.getMessage() for r in caplog.records]
    assert any("lineage.jsonl line 4" in m for m in warned), warned
    assert any("metrics.jsonl line 13" in m for m in warned), warned
    # Trial 1's output_dir does not exist: its rows come from EXPDIR/<trial_id>.
    assert len(read_trial_rows(exp, experiment["trials"]["pbt-cartpole-1"])) == 12
    # A PENDING trial with no folder, and no lineage file, are no rows.
    assert read_trial_rows(exp, experiment["trials"]["pbt-cartpole-4"]) == []
    assert read_lineage(tmp_path) == []


# --------------------------------------------------------------------------- the table


def test_population_table_content(tmp_path):
    exp = make_pbt(tmp_path)
    experiment, lineage = read_experiment(exp), read_lineage(exp)
    table = population_table(experiment, lineage, now=T0 + 103.0)
    lines = table.splitlines()
    assert "pbt-cartpole" in lines[0] and "RUNNING" in lines[0] and "scheduler=pbt" in lines[0]
    assert "exploits=3" in lines[1] and "donor_skips=1" in lines[1] and "preemptions=1" in lines[1]
    assert "elapsed=1m40s" in lines[1] and "updated 3s ago" in lines[1]
    header = next(ln for ln in lines if ln.startswith("trial"))
    for col in ("status", "iter", "env steps", "episode_return_mean", "best", "lr", "entropy_coeff",
                "clones", "donated", "failures", "preempt"):
        assert col in header, col
    body = _table_rows(table)
    order = [r[0] for r in body]
    # Trial 3 cloned trial 0 (the best) twice, so it sits just below it; PENDING is last.
    values = [float(r[4]) for r in body[:4]]
    assert values == sorted(values, reverse=True)
    assert order[-1] == "pbt-cartpole-4" and body[-1][4] == "-"
    by_id = {r[0]: r for r in body}
    # columns: trial status iter steps metric best lr ent clones donated failures preempt
    assert by_id["pbt-cartpole-3"][8:10] == ["2", "0"]
    assert by_id["pbt-cartpole-0"][8:10] == ["0", "2"]
    assert by_id["pbt-cartpole-2"][8:12] == ["1", "0", "1", "0"]
    assert by_id["pbt-cartpole-1"][8:12] == ["0", "1", "0", "1"]
    assert by_id["pbt-cartpole-0"][2:4] == ["12", "48k"]
    # Hyperparameters: current values, 3 significant digits (trial 3 holds 1.2 * trial 0's).
    assert by_id["pbt-cartpole-0"][6:8] == ["0.000333", "0.01"]
    lr3 = experiment["trials"]["pbt-cartpole-3"]["config"]["lr"]
    assert by_id["pbt-cartpole-3"][6] == f"{lr3:.3g}" == "0.0004"
    assert by_id["pbt-cartpole-4"][6:8] == ["0.0003", "0"]
    assert f"best: {order[0]}" in table


def test_mode_min_reverses_the_order(tmp_path):
    hi = _table_rows(population_table(read_experiment(make_pbt(tmp_path / "a"))))
    lo = _table_rows(population_table(read_experiment(make_pbt(tmp_path / "b", mode="min"))))
    assert [r[0] for r in hi[:4]] == [r[0] for r in lo[:4]]  # values were negated: same ranking
    values = [float(r[4]) for r in lo[:4]]
    assert values == sorted(values) and values[0] < 0
    # The same experiment read the other way round: the order flips (PENDING stays last).
    experiment = read_experiment(tmp_path / "a" / "pbt-cartpole")
    experiment["mode"] = "min"
    flipped = _table_rows(population_table(experiment))
    assert [r[0] for r in flipped[:4]] == [r[0] for r in hi[:4]][::-1]
    assert flipped[-1][0] == "pbt-cartpole-4"


def test_table_survives_missing_fields():
    assert "(no trials yet)" in population_table({})
    table = population_table({"name": "x", "trials": {"a": {}, "b": {"status": "ERROR", "error": "boom\ntrace",
                                                                  "last_result": {"iteration": "?"}}}})
    assert "b (ERROR): boom" in table
    s = experiment_summary({"trials": {"a": {"last_result": {"m": float("nan")}}}, "metric": "m"})
    assert s["trials"][0]["metric"] is None and s["best"] is None
    # Without a lineage, clones fall back to num_exploits and donated is unknown.
    s = experiment_summary({"trials": {"a": {"num_exploits": 2}}})
    assert s["trials"][0]["clones"] == 2 and s["trials"][0]["donated"] is None
    assert "  -  " in population_table({"trials": {"a": {"num_exploits": 2}}})


def test_summary_is_json_with_the_table_content(tmp_path):
    exp = make_pbt(tmp_path)
    experiment, lineage = read_experiment(exp), read_lineage(exp)
    s = experiment_summary(experiment, lineage)
    json.dumps(s, allow_nan=False)
    assert s["name"] == "pbt-cartpole" and s["scheduler"] == "pbt" and s["mode"] == "max"
    assert s["counters"]["num_exploits"] == 3 and s["elapsed_s"] == 100.0
    assert s["trial_states"] == {"RUNNING": 3, "TERMINATED": 1, "PENDING": 1}
    table_order = [r[0] for r in _table_rows(population_table(experiment, lineage))]
    assert [r["trial_id"] for r in s["trials"]] == table_order
    t3 = next(r for r in s["trials"] if r["trial_id"] == "pbt-cartpole-3")
    assert t3["clones"] == 2 and t3["donated"] == 0 and t3["iteration"] == 12 and t3["env_steps"] == 48000
    assert set(t3["config"]) == {"lr", "entropy_coeff"}
    assert s["best"]["trial_id"] == table_order[0]


def test_fmt_param():
    assert fmt_param(0.0012345) == "0.00123"
    assert fmt_param(3e-5) == "3e-05"
    assert fmt_param(128) == "128" and fmt_param(True) == "True" and fmt_param(None) == "-"
    assert fmt_param("a-very-long-activation-name") == "a-very-long…"
    assert fmt_param([64, 64]) == "[64,64]"
    assert not math.isnan(float(fmt_param(2.5)))


# --------------------------------------------------------------------------- the plot


def test_plot_pbt(tmp_path):
    exp = make_pbt(tmp_path)
    path = plot_experiment(exp)
    assert path == exp / "pbt.png"
    w, h = png_size(path)
    assert w > 0 and h > 0
    out = plot_experiment(exp, out=tmp_path / "sub" / "by-iter.png", x="iteration")
    assert out == tmp_path / "sub" / "by-iter.png" and png_size(out)[0] > 0
    with pytest.raises(ConfigError, match="no metrics row has 'nope'"):
        plot_experiment(exp, x="nope")


def test_plot_fifo_one_trial_and_no_rows(tmp_path):
    exp = make_fifo(tmp_path / "a")
    assert not (exp / "lineage.jsonl").exists()
    assert png_size(plot_experiment(exp))[1] > 0
    assert png_size(plot_experiment(make_fifo(tmp_path / "b", n=1)))[0] > 0
    assert png_size(plot_experiment(make_fifo(tmp_path / "c", n=3, rows=False), x="nope"))[0] > 0
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "experiment.json").write_text("{}")
    assert png_size(plot_experiment(tmp_path / "d"))[0] > 0
    table = population_table(read_experiment(exp), read_lineage(exp))
    assert [r[0] for r in _table_rows(table)] == ["fifo-1", "fifo-0"]
    assert "scheduler=fifo" in table and "exploits=0" in table


def test_plot_odd_lineage_and_no_start_time(tmp_path):
    """Lineage naming a trial that is not in experiment.json, no started_at (the lineage lanes
    fall back to the target's time_attr), and x = time_s."""
    exp = make_pbt(tmp_path)
    experiment = read_experiment(exp)
    del experiment["started_at"]
    (exp / "experiment.json").write_text(json.dumps(experiment))
    with (exp / "lineage.jsonl").open("a") as f:
        f.write("\n" + json.dumps({"time": T0 + 50, "target": "ghost", "donor": "pbt-cartpole-0"}) + "\n")
        f.write(json.dumps({"target": "pbt-cartpole-1", "donor": "ghost", "target_time": 11}) + "\n")
    assert len(read_lineage(exp)) == 5
    assert png_size(plot_experiment(exp, x="time_s"))[0] > 0
    assert png_size(plot_experiment(exp, x="iteration"))[0] > 0
    assert png_size(plot_experiment(exp, x="training_iteration"))[0] > 0  # Ray Tune's name


def test_plot_without_matplotlib(tmp_path, monkeypatch):
    exp = make_fifo(tmp_path)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ConfigError, match=r"plotting needs matplotlib: pip install 'ftrl\[plot\]'"):
        plot_experiment(exp)
    assert not (exp / "pbt.png").exists()


def test_plot_with_matplotlib_blocked_in_sys_modules(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match="plotting needs matplotlib"):
        plot_experiment(make_fifo(tmp_path))


def test_report_imports_no_torch_or_matplotlib():
    import subprocess

    code = ("import sys, ftrl.tune.report; "
            "bad = [m for m in ('torch', 'matplotlib', 'ftrl.rl', 'ftrl.client') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
