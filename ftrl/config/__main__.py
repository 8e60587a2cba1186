"""`python -m ftrl.config [ALGO]`: every config key with its type, default and doc."""

import sys

from ftrl.config.jobs import describe

print(describe(sys.argv[1] if len(sys.argv) > 1 else "PPO"))
