"""`python -m ftrl.launch.slurm batch|worker ...` (see the package's docstring)."""

import sys

from ftrl.launch.slurm import main

sys.exit(main())
