import sys

from ftrl.cli import main

sys.exit(main())
