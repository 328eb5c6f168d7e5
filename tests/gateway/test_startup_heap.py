"""`igw serve` and `igw picker` freeze their startup heap once they serve
(cli/process.py `freeze_startup_heap`).

A full collection re-scans every object the collector tracks. `igw picker` over 1,024
pods paused its loop for 57-111 ms at each one, about one every 0.7 s, and every
request that arrived in the pause waited it out (`bench/scale.py`, "wait" and "max
pause"). Frozen, the startup heap is out of those scans. The servers run here as users
start them, each in its own process. A `sitecustomize` on their path marks each
`gc.freeze` call on stderr, so the test sees the call in the real process and where it
falls against the line that says the server is up.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inference_gateway.cli.process import freeze_startup_heap

IGW = [sys.executable, "-m", "inference_gateway.cli"]
MARK = "test-startup-heap: gc.freeze"
SITECUSTOMIZE = f"""
import gc, sys
_freeze = gc.freeze
def _marked():
    sys.stderr.write("{MARK}\\n")
    sys.stderr.flush()
    _freeze()
gc.freeze = _marked
"""


def test_the_helper_freezes_what_exists() -> None:
    before = gc.get_freeze_count()
    startup: list[list[int]] = [[] for _ in range(100)]  # tracked, and outlive the call
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() >= before + len(startup)
    finally:
        gc.unfreeze()


@pytest.mark.parametrize(
    ("command", "ready"),
    [("serve", "igw serve: listening on"), ("picker", "igw picker: ext_proc on")],
)
def test_each_server_freezes_its_heap_once_it_serves(
    tmp_path: Path, command: str, ready: str
) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n  - {name: a, address: 127.0.0.1, port: 9}\n")
    ports = ["--port", "0"] if command == "serve" else ["--grpc-port", "0", "--metrics-port", "0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.Popen(
        [*IGW, command, "--endpoints", str(endpoints), *ports],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded: the server says it is up, or exits
            lines.append(line.rstrip())
            if line.startswith(ready):
                break
    finally:
        proc.terminate()
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
    lines += rest.splitlines()
    assert lines.count(MARK) == 1, lines
    up = next(i for i, line in enumerate(lines) if line.startswith(ready))
    assert lines.index(MARK) < up, lines  # frozen by the time it says it serves
