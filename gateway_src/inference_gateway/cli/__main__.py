"""`python -m inference_gateway.cli`: the same entry point as the `igw` script."""

import sys

from inference_gateway.cli.main import main

sys.exit(main())
