"""Session-wide test settings."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

# Coordinators started without a token on loopback keep one under FTRL_HOME; keep the
# tests' out of the user's ~/.ftrl.
os.environ.setdefault("FTRL_HOME", tempfile.mkdtemp(prefix="ftrl-test-home-"))

# A shell without job control (`pytest ... &` in a script) starts its background commands
# with SIGINT ignored, and the processes the tests start inherit that: the Ctrl-C tests
# need Python's own handler here and (reset to the default by exec) in those processes.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


_RESTORED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """What a test installs for SIGINT/SIGTERM/SIGHUP (a SLURM step's handlers, a run
    loop's) is undone after it: tests run in any order."""
    saved = {sig: signal.getsignal(sig) for sig in _RESTORED_SIGNALS}
    yield
    for sig, handler in saved.items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)
