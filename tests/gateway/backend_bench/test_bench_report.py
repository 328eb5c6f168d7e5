"""The terminal table and the HTML page show numbers, faults and failure reasons alike."""

from __future__ import annotations

from rich.console import Console

from inference_gateway.backend_bench.report import (
    COLUMNS,
    render_html,
    render_table,
    row_cells,
    sweep_chart_svg,
)
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
    good.tpot_s = summarize([0.0071, 0.0075])
    good.cost_per_million_tokens = 1.70
    good.tool_calls = ToolCallResult(20, 20, 17, ["case 3: expected ge 250, got ge 251"])
    good.determinism = DeterminismResult(5, 2)
    good.run_to_run_change_pct = -2.5
    good.concurrency = [
        ConcurrencyPoint(1, 131.5, 131.5, 0.05, 0.0073, 1.70),
        ConcurrencyPoint(4, 480.0, 120.0, 0.08, 0.0081, 0.47),
    ]
    bad = BackendResult("down", "m", "http://b/v1", 1.0)
    bad.fail("unreachable: cannot connect to http://b/v1/chat/completions")
    return BenchResult("2026-11-29T12:00:00+00:00", {"runs": 2, "throughput": {
        "max_tokens": 64, "repeats": 5}}, [good, bad])  # fmt: skip


def test_row_cells() -> None:
    good, bad = _result().backends
    assert row_cells(good) == [
        "l4", "131.5", "131.0–132.0", "55/7.3", "$1.70", "20/20", "17/20", "2/5", "-2.5%",
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


def test_html_says_what_produced_the_numbers_and_explains_every_column() -> None:
    result = _result()
    assert "Every backend is a real endpoint" in render_html(result)
    result.backends[0].emulated = "emulated L4, llama-3.1-8b"
    html = render_html(result)
    assert "l4: emulated vLLM pods on loopback" in html
    assert "not measurements of real hardware" in html
    assert ">emulated L4, llama-3.1-8b</small>" in html and ">real endpoint</small>" in html
    for column in (*COLUMNS, "$/h"):
        assert f"<dt>{column}</dt>" in html, f"column {column!r} is not explained"


def test_sweep_chart_is_bars_so_equal_values_stay_visible() -> None:
    """Two backends with the same throughput: both bars and both labels are drawn (a line
    chart drew one line over the other), and two levels are not joined by a line."""
    result = _result()
    twin = BackendResult("l4-twin", "m", "http://c/v1", 0.8048)
    twin.concurrency = list(result.backends[0].concurrency)
    result.backends[1] = twin
    svg = sweep_chart_svg(result)
    assert svg is not None
    assert svg.count(">480</text>") == 2 and svg.count(">132</text>") == 2
    assert "concurrent requests (measured levels only)" in svg


def test_terminal_table_fits_80_columns_and_says_emulated() -> None:
    result = _result()
    result.backends[0].emulated = "emulated L4, llama-3.1-8b"
    console = Console(record=True, width=80)
    render_table(result, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert "-2.5%" in text and "55/7.3" in text  # every column, the last (run Δ) too
    words = " ".join(text.split())
    assert "emulated vLLM pods" in words and "run Δ change of the median" in words
