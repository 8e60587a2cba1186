"""The layering of ftrl's rooms (pyproject.toml [tool.importlinter]) holds, and an
upward import breaks it: `lint-imports` run on the repo, and on a copy of the package
with one planted import from the RL room up into the program (ftrl.cli)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"]


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(LINT, cwd=root, env=env, capture_output=True, text=True, timeout=240)


def test_the_repo_keeps_every_contract():
    out = _lint(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "broken" not in out.stdout.lower().replace("0 broken", "")


def test_a_planted_upward_import_breaks_the_layers(tmp_path):
    shutil.copytree(REPO / "ftrl", tmp_path / "ftrl", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    metrics = tmp_path / "ftrl" / "rl" / "driver" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\nfrom ftrl.cli import main  # planted: rl must never import the program\n")
    out = _lint(tmp_path)
    assert out.returncode != 0, out.stdout
    assert "ftrl.rl is not allowed to import ftrl.cli" in out.stdout
    assert "ftrl.rl.driver.metrics -> ftrl.cli" in out.stdout
