"""Present a `BenchResult`: a rich table for the terminal and a self-contained HTML page.

Both show the same columns, so a screenshot and a shared report agree: median tokens/s
with its spread, median TTFT, cost per million output tokens, tool calls and filters
n/20, distinct outputs at temperature 0, and the run-to-run change. A failed backend
shows its reason in place of numbers. The HTML adds the concurrency sweep as a table and
an inline SVG chart of aggregate tokens/s against concurrency (matplotlib, no network).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import jinja2
from rich.console import Console
from rich.table import Table

from .results import BackendResult, BenchResult

__all__ = ["render_html", "render_table", "row_cells", "sweep_chart_svg"]

COLUMNS = (
    "backend",
    "tok/s",  # median per request at concurrency 1
    "spread",  # min–max
    "TTFT",  # median
    "$/M tok",
    "calls",  # tool calls made, of the cases
    "filters",  # tool calls with the right arguments
    "T=0 distinct",  # distinct outputs of the determinism repeats
    "run Δ",  # run-to-run change of the median tokens/s
)


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


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
        "–" if b.ttft_s.median is None else f"{b.ttft_s.median * 1000:.0f} ms",
        "–" if b.cost_per_million_tokens is None else f"${b.cost_per_million_tokens:.2f}",
        "–" if tools is None else f"{tools.calls}/{tools.cases}",
        "–" if tools is None else f"{tools.filters}/{tools.cases}",
        "–" if det is None else f"{det.distinct}/{det.repeats}",
        "–" if change is None else f"{change:+.1f}%",
    ]


def render_table(result: BenchResult, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(
        title="Backend benchmark (tok/s and TTFT: median per request at concurrency 1)",
        title_justify="left",
    )
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right")
    for b in result.backends:
        cells = row_cells(b)
        style = None
        if b.tool_calls and b.tool_calls.filters < b.tool_calls.cases:
            cells[6] = f"[yellow]{cells[6]}[/]"
        if b.determinism and b.determinism.distinct > 1:
            cells[7] = f"[yellow]{cells[7]}[/]"
        if b.status != "ok":
            style = "red"
            cells[0] = f"{b.label} ✗"
        table.add_row(*cells, style=style)
    console.print(table)
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

    figure, axes = plt.subplots(figsize=(7, 4))
    for label, points in series:
        xs = [x for x, y in points if y is not None]
        ys = [y for _, y in points if y is not None]
        axes.plot(xs, ys, marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("concurrent requests")
    axes.set_ylabel("output tokens/s (all streams)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    buffer = io.StringIO()
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
    }
    return _environment().get_template("backends.html.j2").render(**context)
