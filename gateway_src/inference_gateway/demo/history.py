"""The spread over repeated runs: each `igw demo` appends its figures to
`demo-out/runs.jsonl`, and reports its ratios beside those of the earlier runs with the
same settings.

One run's P99 rests on its slowest few requests, on a machine that may be shared, so a
single ratio says little about the next one. Repeating every policy inside one run would
double the demo's time; instead each run is kept, with the load average it saw, and the
table says how this run's ratio compares with the runs before it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PAIRS", "Spread", "ratios", "record", "spread"]

#: (picker, baseline): the comparisons the demo makes, by data plane
PAIRS = (
    ("gateway", "round-robin"),
    ("envoy+picker", "envoy-round-robin"),
    ("envoy+picker", "envoy-least-request"),
)
KEEP = 10  # runs with the same settings the spread covers, newest first
FILE = "runs.jsonl"


def ratios(p99: Mapping[str, float]) -> dict[str, float]:
    """P99 TTFT of each picker over its baseline, for the pairs this run measured."""
    return {
        f"{picked}/{baseline}": p99[picked] / max(p99[baseline], 1e-9)
        for picked, baseline in PAIRS
        if picked in p99 and baseline in p99
    }


def record(out: Path, settings: Mapping[str, Any], p99: Mapping[str, float]) -> dict[str, Any]:
    """Append this run to `out/runs.jsonl` and return its entry."""
    entry = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": dict(settings),
        "load_1min": round(os.getloadavg()[0], 2),
        "ttft_p99_s": dict(p99),
        "ratios": ratios(p99),
    }
    out.mkdir(parents=True, exist_ok=True)
    with (out / FILE).open("a") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


@dataclass(frozen=True, slots=True)
class Spread:
    runs: int  # including this one
    low: float
    high: float

    @property
    def factor(self) -> float:
        """Highest over lowest: 1.0 when every run agreed."""
        return self.high / self.low if self.low > 0 else float("inf")


def spread(out: Path, settings: Mapping[str, Any]) -> dict[str, Spread]:
    """Per pair, the range of its ratio over the last `KEEP` runs with these settings (a
    line that does not parse, from an older demo or an edit, is skipped)."""
    path = out / FILE
    lines = path.read_text().splitlines() if path.exists() else []
    same: list[dict[str, float]] = []
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("settings") == dict(settings):
            same.append(entry.get("ratios", {}))
        if len(same) == KEEP:
            break
    out_spread = {}
    for pair in {key for entry in same for key in entry}:
        values = [float(entry[pair]) for entry in same if pair in entry]
        out_spread[pair] = Spread(len(values), min(values), max(values))
    return out_spread
