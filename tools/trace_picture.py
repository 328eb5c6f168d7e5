"""Draw one request's trace as a waterfall: a bar per span, indented under its parent,
coloured by the service that made it, labelled with its name and duration, and the
scheduling span's candidates and scores written beside it.

tests/e2e/envoy/test_envoy_traces.py calls `render` on a trace its OTLP receiver
collected when `IGW_TRACE_PICTURE=PATH` is set; docs/tracing.md shows the result:

    IGW_TRACE_PICTURE=docs/images/trace.png .venv/bin/python -m pytest \\
        tests/e2e/envoy/test_envoy_traces.py
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["render"]

COLOURS = {
    "igw.default": "#7f7f7f",  # Envoy (Envoy Gateway's service name `<gateway>.<namespace>`)
    "igw-bbr": "#2ca02c",
    "igw-picker": "#1f77b4",
    "vllm": "#d62728",
}


class Span(Protocol):
    service: str
    name: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


def _ordered(spans: Sequence[Span]) -> list[tuple[Span, int]]:
    """Depth-first from the root, children by start time: (span, depth)."""
    by_parent: dict[str, list[Span]] = {}
    ids = {s.span_id for s in spans}
    for span in spans:
        parent = span.parent_id if span.parent_id in ids else ""
        by_parent.setdefault(parent, []).append(span)
    out: list[tuple[Span, int]] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: s.start_ns):
            out.append((span, depth))
            walk(span.span_id, depth + 1)

    walk("", 0)
    return out


def render(spans: Sequence[Span], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _ordered(spans)
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    width_ms = (end - start) / 1e6
    fig, ax = plt.subplots(figsize=(12, 0.5 * len(rows) + 1.6))
    for y, (span, depth) in enumerate(rows):
        left = (span.start_ns - start) / 1e6
        width = max((span.end_ns - span.start_ns) / 1e6, width_ms / 400)
        ax.barh(y, width, left=left, color=COLOURS.get(span.service, "#9467bd"), height=0.6)
        label = f"{'  ' * depth}{span.service}: {span.name}  ({width:.2f} ms)"
        ax.text(-width_ms * 0.01, y, label, ha="right", va="center", fontsize=8)
        if span.name == "igw.schedule":
            pods = span.attributes.get("igw.candidates.pods", [])
            totals = span.attributes.get("igw.candidates.totals", [])
            scored = ", ".join(f"{p} {t:.2f}" for p, t in zip(pods, totals, strict=False))
            ax.text(
                left + width + width_ms * 0.01, y, f"candidates: {scored}", va="center", fontsize=7
            )
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_xlim(0, width_ms * 1.05)
    ax.set_xlabel("ms since the request reached Envoy")
    ax.set_title("One request's trace: Envoy, bbr, the picker's decision, the pod", fontsize=10)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    fig.subplots_adjust(left=0.45)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
