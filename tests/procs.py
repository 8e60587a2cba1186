"""Starting `ftrl coordinator` / `ftrl worker` by hand (for setups LocalCluster does not
make: non-loopback addresses, network namespaces, odd token files)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def env(**extra: str) -> dict[str, str]:
    """This environment without FTRL_* settings (but FTRL_HOME), with the repo on PYTHONPATH."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("FTRL_") or k == "FTRL_HOME"}
    path = out.get("PYTHONPATH")
    out["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")
    out.update(extra)
    return out


def ftrl(*args: str, log_level: str = "INFO") -> list[str]:
    return [sys.executable, "-m", "ftrl", "--log-level", log_level, *args]


def start(argv: list[str], log_path: Path, environ: dict[str, str] | None = None) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                env=environ or env())


def wait_port(port_file: Path, proc: subprocess.Popen, log_path: Path, timeout: float = 30.0) -> int:
    """The port a coordinator wrote to `port_file` once it listens."""
    deadline = time.monotonic() + timeout
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None:
            raise AssertionError(f"coordinator exited with {proc.returncode}:\n{tail(log_path)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"coordinator did not listen within {timeout:g}s:\n{tail(log_path)}")
        time.sleep(0.02)
    return int(port_file.read_text().strip())


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def stop(*procs: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL whatever did not exit within `timeout`."""
    live = [p for p in procs if p is not None and p.poll() is None]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGCONT)
            p.terminate()
    for p in live:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
