"""The launcher's child processes: their environment, started with their output in a
log, ended (a signal, then SIGKILL) and waited for."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from ftrl.launch.slurm.base import ENV_TOKEN_FILE


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of the launched processes: no token in it (only --token-file)."""
    out = {k: v for k, v in env.items() if k not in ("FTRL_TOKEN", ENV_TOKEN_FILE)}
    out["PYTHONUNBUFFERED"] = "1"
    return out


def _open_log(path: Path) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab")  # owned by the caller, closed once the child has it


def start_process(argv: list[str], env: Mapping[str, str], log: Path | None = None) -> subprocess.Popen:
    """Start `argv` (output appended to `log`, else to this process's)."""
    if log is None:
        return subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL)
    with _open_log(log) as out:
        return subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=out)


def end_process(proc: subprocess.Popen | None, sig: int, timeout: float) -> None:
    """Send `sig` to `proc`, wait up to `timeout`, then SIGKILL it (and reap it)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(max(0.0, timeout))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5.0)


def wait_or_kill(proc: subprocess.Popen | None, timeout: float) -> None:
    """Wait up to `timeout` for `proc` to exit by itself, then SIGKILL it."""
    if proc is None:
        return
    try:
        proc.wait(max(0.0, timeout))
    except subprocess.TimeoutExpired:
        end_process(proc, signal.SIGKILL, 5.0)


def log_tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of the file at `path` ("" if it cannot be read)."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""
