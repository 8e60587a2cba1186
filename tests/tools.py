"""Real tools the launch and ops tests drive (installed on demand, skipped with a reason)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def ensure_binary(binary: str, package: str, timeout_s: float = 300.0) -> str:
    """The path of `binary`, installing Debian `package` first if it is missing; skips the
    test (saying why) only when it cannot be installed here."""
    path = shutil.which(binary)
    if path:
        return path
    if shutil.which("apt-get") is None:
        pytest.skip(f"{binary} is not installed and there is no apt-get to install {package}")
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    try:
        proc = subprocess.run(["apt-get", "install", "-y", "-q", package], capture_output=True,
                              text=True, timeout=timeout_s, env=env)
        if proc.returncode != 0:  # stale package lists: refresh once
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, timeout=timeout_s, env=env)
            proc = subprocess.run(["apt-get", "install", "-y", "-q", package], capture_output=True,
                                  text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        pytest.skip(f"installing {package} took more than {timeout_s:g}s")
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} could not be installed (apt-get install {package}: "
                    f"{proc.stderr.strip()[-300:]})")
    return path
