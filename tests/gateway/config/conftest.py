"""The managed-shape tests share their sample documents (test_managed_validation.GOOD)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
