"""bench/migration.py runs end to end at a tiny size: both gateways answer every request
when nothing breaks, a killed pod's streams are resumed, and so are a lost cluster's
behind `igw global`, each gap seen by the client also counted by the gateway's own
histogram."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import migration


def test_the_gap_is_the_silence_that_spans_the_break() -> None:
    stream = migration.Stream("on", sent=0.0, times=[1.0, 1.1, 1.2, 1.9, 2.0])
    assert stream.gap_across(1.25) == 1.9 - 1.2
    assert stream.gap_across(2.5) is None  # it had ended
    assert stream.ttft == 1.0


def test_a_tiny_run_resumes_every_broken_stream_and_reports_both_phases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the run's logs go, it ended well
    args = argparse.Namespace(
        pods=3,
        concurrency=3,
        tokens=120,
        prompt_tokens=200,
        rounds=2,
        kills=1,
        cluster_kills=1,
        settle_s=0.5,
        json=True,
    )
    result = asyncio.run(migration.run(args))
    overhead, resume = result["overhead"], result["resume"]
    for name in ("on", "off"):
        assert overhead[name]["requests"] == 3 and overhead[name]["failed"] == 0
        assert overhead[name]["ttft_p50_ms"] > 0 and overhead[name]["cpu_ms_per_request"] > 0
    assert resume["kills"] == 1 and resume["failed"] == 0, resume["errors"]
    assert resume["resumed_streams"] >= 1 and resume["resume_gap_p99_ms"] > 0
    histogram = resume["gateway_resume_gap"]
    # the gateway resumed what the client saw resumed (and counted it as a migration)
    assert histogram["count"] >= resume["resumed_streams"]
    assert histogram["migrations_total"] == histogram["count"]
    # tier 2: a cluster lost whole behind `igw global`, its streams resumed on the other
    lost = result["cluster_loss"]
    assert lost["kills"] == 1 and lost["failed"] == 0, lost["errors"]
    assert lost["resumed_streams"] >= 1 and lost["resume_gap_p99_ms"] > 0
    assert lost["gateway_resume_gap"]["count"] >= lost["resumed_streams"]
    assert list(tmp_path.iterdir()) == []
