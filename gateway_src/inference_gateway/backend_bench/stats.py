"""Summaries of repeated measurements: median and spread, never a lone number."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Summary", "relative_change_pct", "summarize"]


@dataclass(frozen=True)
class Summary:
    """Median, extremes and sample standard deviation of `n` samples (n = 0: all None)."""

    n: int
    median: float | None
    min: float | None
    max: float | None
    stdev: float | None


def summarize(samples: Sequence[float]) -> Summary:
    if not samples:
        return Summary(0, None, None, None, None)
    stdev = statistics.stdev(samples) if len(samples) > 1 else 0.0
    return Summary(len(samples), statistics.median(samples), min(samples), max(samples), stdev)


def relative_change_pct(before: float | None, after: float | None) -> float | None:
    """(after − before) / before in percent; None when either side is missing or zero."""
    if before is None or after is None or before == 0:
        return None
    return (after - before) / before * 100
