"""Shared test setup: tests only ever talk to loopback. Helper modules that tests of
several folders use (`checkov_run`) live beside this file and import by name.

`make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`): most tests
wait on sockets, processes and timers rather than compute, so two workers halve the wall
time on a 2-core machine. `xdist_groups` says how the tests are grouped over them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from xdist_groups import pytest_collection_modifyitems  # noqa: F401  (the hook)
