"""What a backend benchmark found: plain dataclasses, and the JSON document they make.

The JSON (`igw bench backends --json`) is one object::

    {"generated_at", "settings": {...}, "backends": [
        {"label", "model", "base_url", "hourly_usd", "status": "ok" | "error", "error",
         "tokens_per_s": {"n", "median", "min", "max", "stdev"}, "ttft_s": {...},
         "tpot_s": {...},
         "cost_per_million_tokens", "runs": [{"run", "tokens_per_s_median",
         "ttft_s_median"}], "run_to_run_change_pct",
         "tool_calls": {"cases", "calls", "filters", "failures": [...]},
         "determinism": {"repeats", "distinct"},
         "concurrency": [{"level", "aggregate_tokens_per_s", "tokens_per_s_median",
                          "ttft_s_median", "tpot_s_median", "cost_per_million_tokens"}],
         "emulated": "emulated H100, llama-3.1-8b" | null}]}

`tokens_per_s` is per request at concurrency 1, output tokens over the whole request;
`cost_per_million_tokens` is computed from its median (`cost.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from inference_gateway.backend_bench.stats import Summary

__all__ = [
    "BackendResult",
    "BenchResult",
    "ConcurrencyPoint",
    "DeterminismResult",
    "RunSummary",
    "ToolCallResult",
]


@dataclass(frozen=True)
class ConcurrencyPoint:
    level: int
    aggregate_tokens_per_s: float | None  # all streams' tokens over the wall time
    tokens_per_s_median: float | None  # per request
    ttft_s_median: float | None
    tpot_s_median: float | None  # time per output token after the first, per request
    cost_per_million_tokens: float | None  # from the aggregate rate: the instance's cost


@dataclass(frozen=True)
class ToolCallResult:
    cases: int
    calls: int
    filters: int
    failures: list[str]


@dataclass(frozen=True)
class DeterminismResult:
    repeats: int
    distinct: int


@dataclass(frozen=True)
class RunSummary:
    run: int
    tokens_per_s_median: float | None
    ttft_s_median: float | None


@dataclass
class BackendResult:
    label: str
    model: str
    base_url: str
    hourly_usd: float
    status: str = "ok"
    error: str | None = None
    tokens_per_s: Summary = field(default_factory=lambda: Summary(0, None, None, None, None))
    ttft_s: Summary = field(default_factory=lambda: Summary(0, None, None, None, None))
    tpot_s: Summary = field(default_factory=lambda: Summary(0, None, None, None, None))
    cost_per_million_tokens: float | None = None
    runs: list[RunSummary] = field(default_factory=list)
    run_to_run_change_pct: float | None = None
    tool_calls: ToolCallResult | None = None
    determinism: DeterminismResult | None = None
    concurrency: list[ConcurrencyPoint] = field(default_factory=list)
    #: what an emulated backend stands for ("emulated H100, llama-3.1-8b"); None for a
    #: real endpoint. Reports say so: an emulator's figures are its model of the GPU.
    emulated: str | None = None

    def fail(self, reason: str) -> None:
        """Mark the backend failed; keep what was measured before the failure."""
        if self.status == "ok":
            self.status, self.error = "error", reason


@dataclass
class BenchResult:
    generated_at: str
    settings: dict[str, Any]
    backends: list[BackendResult]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def failed(self) -> list[BackendResult]:
        return [b for b in self.backends if b.status != "ok"]
