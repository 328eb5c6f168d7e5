"""`igw serve` and `igw picker` set the cyclic collector up once they serve
(cli/process.py `settle_collector`): the startup heap frozen, the young generation
collected every `YOUNG_THRESHOLD` allocations.

A full collection re-scans every object the collector tracks. `igw picker` over 1,024
pods paused its loop for 57-111 ms at each one, about one every 0.7 s, and every
request that arrived in the pause waited it out (`bench/scale.py`, "wait" and "max
pause"). Frozen, the startup heap is out of those scans; with young collections rarer,
a pod's view no longer outlives enough of them to reach the oldest generation. The
servers run here as users start them, each in its own process. A `sitecustomize` on
their path marks each `gc.freeze` and `gc.set_threshold` call on stderr, so the test
sees the calls in the real process and where they fall against the line that says the
server is up.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inference_gateway.cli.process import YOUNG_THRESHOLD, settle_collector

IGW = [sys.executable, "-m", "inference_gateway.cli"]
MARK = "test-startup-heap: gc.freeze"
THRESHOLD_MARK = "test-startup-heap: gc.set_threshold"
SITECUSTOMIZE = f"""
import gc, sys
_freeze, _set_threshold = gc.freeze, gc.set_threshold
def _marked():
    sys.stderr.write("{MARK}\\n")
    sys.stderr.flush()
    _freeze()
def _threshold_marked(*thresholds):
    sys.stderr.write("{THRESHOLD_MARK} " + " ".join(map(str, thresholds)) + "\\n")
    sys.stderr.flush()
    _set_threshold(*thresholds)
gc.freeze, gc.set_threshold = _marked, _threshold_marked
"""


def test_the_helper_freezes_what_exists_and_collects_the_young_less_often() -> None:
    before, thresholds = gc.get_freeze_count(), gc.get_threshold()
    startup: list[list[int]] = [[] for _ in range(100)]  # tracked, and outlive the call
    try:
        settle_collector()
        assert gc.get_freeze_count() >= before + len(startup)
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *thresholds[1:])
        assert thresholds[0] < YOUNG_THRESHOLD  # CPython's default is 700
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.parametrize(
    ("command", "ready"),
    [("serve", "igw serve: listening on"), ("picker", "igw picker: ext_proc on")],
)
def test_each_server_settles_its_collector_once_it_serves(
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
    set_young = f"{THRESHOLD_MARK} {YOUNG_THRESHOLD} 10 10"  # CPython's older thresholds
    assert lines.count(set_young) == 1, lines
    up = next(i for i, line in enumerate(lines) if line.startswith(ready))
    assert lines.index(MARK) < up, lines  # frozen by the time it says it serves
    assert lines.index(set_young) < up, lines
