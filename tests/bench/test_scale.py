"""bench/scale.py runs end to end on a tiny fleet: the synthetic pods' pages change on
every scrape, and one point reports every figure the sizing guide reads."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scale


def test_the_fleet_serves_a_real_size_page_that_changes_and_its_pools_model() -> None:
    with scale.Fleet(3, 2) as fleet:
        base = f"http://127.0.0.1:{fleet.ports[1]}"
        pages = [urllib.request.urlopen(f"{base}/metrics", timeout=10).read() for _ in range(2)]
        models = urllib.request.urlopen(f"{base}/v1/models", timeout=10).read()
    assert len(pages[0]) > 40_000 and pages[0] != pages[1]  # no unchanged-page shortcut
    assert b"vllm:num_requests_waiting" in pages[0] and b'"model-1"' in models


def test_one_point_reports_the_pickers_figures() -> None:
    figures = scale.run_point(4, 2, 20, 1.0, None)
    assert figures["ready_pods"] == 4 and figures["failed_decisions"] == 0
    assert figures["decisions"] >= 10 and figures["decision_p99_ms"] > 0
    assert figures["picker_cores"] > 0 and figures["rss_mib"] > 20
    assert 0 < figures["view_age_max_ms"] < 2000  # views are fresh: the pods answer
    assert figures["fleet_cores"] >= 0 and figures["rounds_per_s"] > 0
