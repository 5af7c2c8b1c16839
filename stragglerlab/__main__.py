"""`python -m stragglerlab` runs the CLI."""

import sys

from stragglerlab.cli import main

sys.exit(main())
