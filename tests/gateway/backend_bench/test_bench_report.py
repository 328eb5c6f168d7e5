"""The terminal table and the HTML page show numbers, faults and failure reasons alike."""

from __future__ import annotations

from rich.console import Console

from inference_gateway.backend_bench.report import render_html, render_table, row_cells
from inference_gateway.backend_bench.results import (
    BackendResult,
    BenchResult,
    ConcurrencyPoint,
    DeterminismResult,
    ToolCallResult,
)
from inference_gateway.backend_bench.stats import summarize


def _result() -> BenchResult:
    good = BackendResult("l4", "m", "http://a/v1", 0.8048)
    good.tokens_per_s = summarize([131.0, 131.5, 132.0])
    good.ttft_s = summarize([0.05, 0.06])
    good.cost_per_million_tokens = 1.70
    good.tool_calls = ToolCallResult(20, 20, 17, ["case 3: expected ge 250, got ge 251"])
    good.determinism = DeterminismResult(5, 2)
    good.run_to_run_change_pct = -2.5
    good.concurrency = [
        ConcurrencyPoint(1, 131.5, 131.5, 0.05, 1.70),
        ConcurrencyPoint(4, 480.0, 120.0, 0.08, 0.47),
    ]
    bad = BackendResult("down", "m", "http://b/v1", 1.0)
    bad.fail("unreachable: cannot connect to http://b/v1/chat/completions")
    return BenchResult("2026-11-29T12:00:00+00:00", {"runs": 2, "throughput": {
        "max_tokens": 64, "repeats": 5}}, [good, bad])  # fmt: skip


def test_row_cells() -> None:
    good, bad = _result().backends
    assert row_cells(good) == [
        "l4", "131.5", "131.0–132.0", "55 ms", "$1.70", "20/20", "17/20", "2/5", "-2.5%",
    ]  # fmt: skip
    assert row_cells(bad)[1:] == ["–"] * 8


def test_table_and_html_show_faults_and_reasons() -> None:
    result = _result()
    console = Console(record=True, width=140)
    render_table(result, console)
    text = console.export_text()
    assert "17/20" in text and "down ✗" in text
    assert "down: unreachable: cannot connect" in text
    html = render_html(result)
    assert "<svg" in html and "$0.47" in html
    assert "<strong>down</strong> failed: unreachable" in html
    assert "case 3: expected ge 250, got ge 251" in html
    assert result.failed == [result.backends[1]]
