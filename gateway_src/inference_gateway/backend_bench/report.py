"""Present a `BenchResult`: a rich table for the terminal and a self-contained HTML page.

Both show the same columns, so a screenshot and a shared report agree: median tokens/s
with its spread, median TTFT and TPOT, cost per million output tokens, tool calls and filters
n/20, distinct outputs at temperature 0, and the run-to-run change; `COLUMN_HELP` says
what each one is, and both say which backends are emulated (an emulator's figures are its
model of a GPU, not a measurement of one). A failed backend shows its reason in place of
numbers. The HTML adds the concurrency sweep as a table and an inline SVG chart
(matplotlib, no network): grouped bars of aggregate tokens/s per concurrency level, so
equal values stay visible side by side and two measured levels are not joined by a line
that implies the values between them.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import jinja2
from rich.console import Console
from rich.table import Table

from inference_gateway.backend_bench.results import BackendResult, BenchResult

__all__ = ["COLUMN_HELP", "render_html", "render_table", "row_cells", "sweep_chart_svg"]

COLUMNS = (
    "backend",
    "tok/s",  # median per request at concurrency 1
    "spread",  # min–max
    "TTFT / TPOT ms",  # medians
    "$/M tok",
    "calls",  # tool calls made, of the cases
    "filters",  # tool calls with the right arguments
    "T=0 distinct",  # distinct outputs of the determinism repeats
    "run Δ",  # run-to-run change of the median tokens/s
)

#: every column of the table (and the page's `$/h`), in words, for the legend
COLUMN_HELP = {
    "backend": "the label in BACKENDS.yaml; ✗ marks a backend that failed (reason below)",
    "tok/s": "median output tokens per second of one request at a time (concurrency 1), "
    "over every repeat of every run",
    "spread": "lowest–highest of those per-request tokens/s",
    "TTFT / TPOT ms": "at concurrency 1, in milliseconds: median time to first token "
    "(request sent to first streamed token) / median time per output token after the "
    "first (the decode step a stream waits for)",
    "$/M tok": "cost per million output tokens of one stream on one instance: "
    "$/h ÷ (tok/s × 3,600) × 10⁶",
    "calls": "tool-call cases (of n) where the backend answered with a call to the "
    "count_ids tool at all",
    "filters": "tool-call cases (of n) whose call had exactly the right arguments",
    "T=0 distinct": "distinct outputs among the repeats of one prompt at temperature 0 "
    "(1 = deterministic)",
    "run Δ": "change of the median tokens/s from the first run to the last "
    "(how repeatable the figure is)",
    "$/h": "the instance's hourly price used for cost",
}


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _latency_ms(ttft_s: float | None, tpot_s: float | None) -> str:
    """`TTFT/TPOT` in milliseconds, one cell (the 80-column table has no room for two)."""
    if ttft_s is None:
        return "–"
    return f"{ttft_s * 1000:.0f}/" + ("–" if tpot_s is None else f"{tpot_s * 1000:.1f}")


def row_cells(b: BackendResult) -> list[str]:
    """One backend's cells, in `COLUMNS` order (text shared by the table and the page)."""
    t = b.tokens_per_s
    spread = "–" if t.min is None else f"{t.min:.1f}–{t.max:.1f}"
    tools = b.tool_calls
    det = b.determinism
    change = b.run_to_run_change_pct
    return [
        b.label,
        _num(t.median, ".1f"),
        spread,
        _latency_ms(b.ttft_s.median, b.tpot_s.median),
        "–" if b.cost_per_million_tokens is None else f"${b.cost_per_million_tokens:.2f}",
        "–" if tools is None else f"{tools.calls}/{tools.cases}",
        "–" if tools is None else f"{tools.filters}/{tools.cases}",
        "–" if det is None else f"{det.distinct}/{det.repeats}",
        "–" if change is None else f"{change:+.1f}%",
    ]


def provenance(result: BenchResult) -> str:
    """One sentence: what produced these numbers (emulated pods, real endpoints, both)."""
    emulated = [b for b in result.backends if b.emulated]
    if not emulated:
        return "Every backend is a real endpoint (base_url in BACKENDS.yaml)."
    what = (
        "emulated vLLM pods on loopback (igw emulate): the figures are the emulator's "
        "model of each GPU, not measurements of real hardware"
    )
    if len(emulated) == len(result.backends):
        return f"Every backend is one of the {what}."
    names = ", ".join(b.label for b in emulated)
    return f"{names}: {what}; the others are real endpoints."


def render_table(result: BenchResult, console: Console | None = None) -> None:
    from inference_gateway.terminal import Column, print_table

    console = console or Console()
    rows = []
    for b in result.backends:
        cells = row_cells(b)
        if b.tool_calls and b.tool_calls.filters < b.tool_calls.cases:
            cells[6] = f"[yellow]{cells[6]}[/]"
        if b.determinism and b.determinism.distinct > 1:
            cells[7] = f"[yellow]{cells[7]}[/]"
        if b.status != "ok":
            cells = [f"[red]{c}[/]" for c in [f"{b.label} ✗", *cells[1:]]]
        rows.append(cells)
    print_table(
        console,
        "Backend benchmark (tok/s, TTFT, TPOT: median per request at concurrency 1)",
        [Column(COLUMNS[0], text=True), *(Column(c.replace(" ", "\n")) for c in COLUMNS[1:])],
        rows,
        legend=provenance(result),
    )
    legend = Table.grid(padding=(0, 2))
    legend.add_column(no_wrap=True, style="bold")
    legend.add_column()
    for column in COLUMNS[1:]:
        legend.add_row(column, COLUMN_HELP[column])
    console.print(legend)
    for b in result.backends:
        if b.error:
            console.print(f"[red]{b.label}[/]: {b.error}")


def sweep_chart_svg(result: BenchResult) -> str | None:
    """Aggregate tokens/s against concurrency, one line per backend; None if no data."""
    series = [
        (b.label, [(p.level, p.aggregate_tokens_per_s) for p in b.concurrency])
        for b in result.backends
        if any(p.aggregate_tokens_per_s for p in b.concurrency)
    ]
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    levels = sorted({x for _, points in series for x, y in points if y is not None})
    width = 0.8 / len(series)
    figure, axes = plt.subplots(figsize=(7, 4))
    for i, (label, points) in enumerate(series):
        values = dict(points)
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(levels))]
        ys = [values.get(level) or 0.0 for level in levels]
        bars = axes.bar(xs, ys, width * 0.95, label=label)
        axes.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    axes.set_xticks(range(len(levels)), [str(level) for level in levels])
    axes.set_xlabel("concurrent requests (measured levels only)")
    axes.set_ylabel("output tokens/s, all streams together")
    axes.grid(True, axis="y", alpha=0.3)
    axes.margins(y=0.12)
    axes.legend(fontsize=8)
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none"}):  # text stays text: searchable, smaller
        figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    svg = buffer.getvalue()
    return svg[svg.find("<svg") :]


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(result: BenchResult) -> str:
    context: dict[str, Any] = {
        "result": result,
        "columns": COLUMNS,
        "rows": [(b, row_cells(b)) for b in result.backends],
        "chart": sweep_chart_svg(result),
        "provenance": provenance(result),
        "column_help": COLUMN_HELP,
    }
    return _environment().get_template("backends.html.j2").render(**context)
