"""How `make test` splits the suite over its two pytest-xdist workers (`--dist loadgroup`).

A test file's tests stay on one worker, so its module fixtures start once and its tests
never race each other's servers; every CDK stack test shares one worker, where the
session's synths of dev and prod are built once.

The hook runs first (`tryfirst`). pytest-xdist's worker reads the `xdist_group` marks in
its own `pytest_collection_modifyitems` and appends the group to each node id, which is
what its scheduler splits on (`xdist/remote.py`, `WorkerInteractor`). That plugin is
registered after the conftest files, so it is called before them unless told otherwise:
marks added by a plain conftest hook are never read, and every test is scheduled on its
own. `tests/test_xdist_groups.py` runs a small suite on two workers to hold this.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

#: folders (under tests/) whose tests share session fixtures too costly to build twice
ONE_WORKER = {"stacks": "cdk-synth"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath / "tests"
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        try:
            path = PurePosixPath(item.path.relative_to(root).as_posix())
        except ValueError:  # a test file outside tests/, named on the command line
            path = PurePosixPath(item.path.as_posix())
        group = ONE_WORKER.get(path.parts[0], path.as_posix())
        item.add_marker(pytest.mark.xdist_group(name=group))
