"""Shared test setup: tests only ever talk to loopback. Helper modules that tests of
several folders use (`checkov_run`) live beside this file and import by name."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
