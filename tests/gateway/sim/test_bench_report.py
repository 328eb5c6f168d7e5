"""`make bench`'s must-hold checks and report writers on a hand-built results document."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def bench() -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        import matrix
        import report
        import run

        yield run, report, matrix
    finally:
        sys.path.remove(str(BENCH))


def figures(p99: float, rejected: int = 0) -> dict[str, Any]:
    return {
        "ttft_p50_s": p99 / 10,
        "ttft_p95_s": p99 / 2,
        "ttft_p99_s": p99,
        "e2e_p50_s": 1.0,
        "e2e_p99_s": 5.0,
        "tpot_p50_s": 0.02,
        "tpot_p99_s": 0.05,
        "output_tokens_per_s": 1000.0,
        "completed": 100,
        "rejected": rejected,
        "cost_per_million_tokens": 1.0,
        "ttft_quantiles_s": [p99 * q / 102 for q in range(103)],
    }


def case(kind: str, name: str, policies: dict[str, dict[str, Any]], **params: Any) -> dict:
    return {
        "kind": kind,
        "scenario": name,
        "seed": 1,
        "duration_s": 60.0,
        "pods": 8,
        "scrape_interval_ms": 50.0,
        "params": params,
        "capacity_rps": 10.0,
        "policies": policies,
    }


def document(bench: Any) -> dict[str, Any]:
    run, _, matrix = bench
    peers = {p: figures(10.0) for p in matrix.PEERS}
    cases = {
        "scenario/mixed-fleet-bursty": case(
            "scenario",
            "mixed-fleet-bursty",
            {"gateway": figures(4.0), **peers, "oracle": figures(3.0)},
        ),
        # beats every peer on P99, but only by rejecting: a failed check
        "scenario/lora-mix": case("scenario", "lora-mix", {"gateway": figures(1.0, 50), **peers}),
        "scenario/long-context": case(
            "scenario", "long-context", {"gateway": figures(10.4), **peers}
        ),
        "replicas/mixed-fleet-bursty": case(
            "replicas",
            "mixed-fleet-bursty",
            {
                "gateway@2": figures(4.4),
                "gateway@4": figures(4.7),
                "gateway@4-unshared": figures(6.2),
            },
            replicas=[2, 4],
        ),
        "load-sweep/shared-prefix/0.5": case(
            "load-sweep", "shared-prefix@load0.5", {"gateway": figures(0.1)}, load=0.5
        ),
    }
    return {
        "schema": run.SCHEMA,
        "run": {
            "started_at": "2026-01-01T00:00:00+00:00",
            "wall_s": 1.0,
            "quick": False,
            "jobs": 1,
            "git_commit": "abc",
            "python": "3.11",
            "cpus": 2,
            "load_average": [1.0, 1.0, 1.0],
            "cpu_s_by_job": {"scenario/lora-mix|gateway": 1.0},
        },
        "cases": cases,
        "checks": run.evaluate_checks(cases),
        "overhead": {"picker_throughput": {"status": "ok", "figures": {"p99_ms": 1.5}}},
    }


def test_checks_compare_p99_and_rejections(bench: Any) -> None:
    checks = {(c["check"], c["scenario"]): c for c in document(bench)["checks"]}
    mixed = checks[("beats-peers", "mixed-fleet-bursty")]
    assert mixed["pass"] and mixed["ratio"] == pytest.approx(0.4)
    lora = checks[("beats-peers", "lora-mix")]
    assert lora["ratio"] < 1 and lora["gateway_rejected"] == 50 and not lora["pass"]
    long = checks[("within-5pct", "long-context")]
    assert long["pass"] and long["ratio"] == pytest.approx(1.04)
    replicas = checks[("replicas-4-within-1.15x", "mixed-fleet-bursty")]
    assert replicas["reference"] == "gateway@4"  # the shared replicas, not the unshared
    assert replicas["ratio"] == pytest.approx(1.175) and not replicas["pass"]
    assert ("beats-peers", "shared-prefix") not in checks  # no case, no verdict


def test_reports_are_written_and_json_round_trips(bench: Any, tmp_path: Path) -> None:
    _, report, _ = bench
    doc = document(bench)
    report.write_reports(doc, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == doc
    summary = (tmp_path / "summary.md").read_text()
    assert "| beats-peers | lora-mix |" in summary and "**FAIL**" in summary
    assert "### P99 TTFT (s) versus load: shared-prefix (60 s per point)" in summary
    assert "p99_ms" in summary
    html = (tmp_path / "report.html").read_text()
    assert html.count("<img") >= 3 and "data:image/png;base64," in html
