"""Shared test setup: tests only ever talk to loopback. Helper modules that tests of
several folders use (`checkov_run`) live beside this file and import by name.

`make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`): most tests
wait on sockets, processes and timers rather than compute, so two workers halve the wall
time on a 2-core machine. The groups keep what shares state on one worker: a test file's
tests stay together (its module fixtures start once), and every CDK stack test shares
one worker, where the session's synths of dev and prod are built once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).parent
#: folders whose tests share session fixtures too costly to build on every worker
ONE_WORKER = {"stacks": "cdk-synth"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        path = Path(str(item.path)).relative_to(ROOT)
        group = ONE_WORKER.get(path.parts[0], path.as_posix())
        item.add_marker(pytest.mark.xdist_group(name=group))
