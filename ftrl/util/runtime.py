"""Process-level helpers: logging setup, uvloop, signals, parent-death signal, subreaper."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def setup_logging(level: str = "INFO", role: str = "ftrl") -> None:
    """Log to stderr with time, role and pid, once per process."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s {role}[%(process)d] %(name)s: %(message)s")
    )
    root.addHandler(handler)
    root.setLevel(level.upper())


def run_async(main: Coroutine[Any, Any, Any]) -> Any:
    """Run `main` on uvloop when available (the default loop otherwise)."""
    try:
        import uvloop

        return uvloop.run(main)
    except ImportError:  # pragma: no cover
        return asyncio.run(main)


def stop_on_signals(stop: asyncio.Event, signals=(signal.SIGTERM, signal.SIGINT)) -> None:
    """Set `stop` when one of `signals` arrives."""
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except OSError:
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)


def set_child_subreaper(on: bool = True) -> bool:
    """Make this process the reaper of its orphaned descendants (Linux >= 3.4): they are
    reparented to it instead of to init, so it can `waitpid` them. True when it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except OSError:
        return False
