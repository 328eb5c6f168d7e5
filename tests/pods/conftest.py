"""The pod harness's modules are plain modules beside the tests (no package here)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
