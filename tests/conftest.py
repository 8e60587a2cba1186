"""Session-wide test settings."""

from __future__ import annotations

import os
import tempfile

# Coordinators started without a token on loopback keep one under FTRL_HOME; keep the
# tests' out of the user's ~/.ftrl.
os.environ.setdefault("FTRL_HOME", tempfile.mkdtemp(prefix="ftrl-test-home-"))
