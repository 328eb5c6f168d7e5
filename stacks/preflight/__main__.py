"""`python -m stacks.preflight ENVIRONMENT`: see `stacks.preflight.cli`."""

import sys

from .cli import main

sys.exit(main())
