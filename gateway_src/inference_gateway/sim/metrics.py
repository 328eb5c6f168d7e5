"""The simulator's observer: per-request outcomes in, one report per policy out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inference_gateway.core.request.latency import time_per_output_token

__all__ = ["Observer"]


@dataclass(slots=True)
class Observer:
    arrivals: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    # time per output token after the first: what a prefill stalling the batch costs
    # every running decode (requests of one output token have none)
    tpot: list[float] = field(default_factory=list)
    bands: list[str] = field(default_factory=list)
    output_tokens: int = 0
    completed: int = 0
    rejected: int = 0
    rejected_by_band: dict[str, int] = field(default_factory=dict)
    last_finish: float = 0.0

    def on_rejected(self, band: str = "standard") -> None:
        self.rejected += 1
        self.rejected_by_band[band] = self.rejected_by_band.get(band, 0) + 1

    def on_finish(
        self, arrival: float, first_token: float, finish: float, tokens: int, band: str
    ) -> None:
        self.ttft.append(first_token - arrival)
        self.e2e.append(finish - arrival)
        tpot = time_per_output_token(first_token, finish, tokens)
        if tpot is not None:
            self.tpot.append(tpot)
        self.bands.append(band)
        self.output_tokens += tokens
        self.completed += 1
        self.last_finish = max(self.last_finish, finish)

    def report(
        self,
        *,
        duration_s: float,
        fleet_usd_per_hour: float,
        ttft_quantiles: Sequence[float] = (),
    ) -> dict[str, Any]:
        """The policy's figures; with `ttft_quantiles` (percentiles, 0-100) also
        `ttft_quantiles_s`, the TTFT at each (`make bench` draws its CDFs from them)."""
        ttft = np.asarray(self.ttft) if self.ttft else np.asarray([np.nan])
        e2e = np.asarray(self.e2e) if self.e2e else np.asarray([np.nan])
        tpot = np.asarray(self.tpot) if self.tpot else np.asarray([np.nan])
        span = max(duration_s, self.last_finish)
        tokens = max(self.output_tokens, 1)
        out: dict[str, Any] = {
            "ttft_p50_s": _round(np.percentile(ttft, 50)),
            "ttft_p95_s": _round(np.percentile(ttft, 95)),
            "ttft_p99_s": _round(np.percentile(ttft, 99)),
            "e2e_p50_s": _round(np.percentile(e2e, 50)),
            "e2e_p99_s": _round(np.percentile(e2e, 99)),
            "tpot_p50_s": _round(np.percentile(tpot, 50)),
            "tpot_p99_s": _round(np.percentile(tpot, 99)),
            "output_tokens_per_s": _round(self.output_tokens / span),
            "completed": self.completed,
            "rejected": self.rejected,
            "cost_per_million_tokens": _round(fleet_usd_per_hour * span / 3600 / tokens * 1e6),
        }
        if ttft_quantiles and self.ttft:
            values = np.percentile(ttft, list(ttft_quantiles))
            out["ttft_quantiles_s"] = [_round(v) for v in values]
        if len(set(self.bands)) > 1 or len(self.rejected_by_band) > 1:
            bands = np.asarray(self.bands)
            out["ttft_p99_s_by_band"] = {
                b: _round(np.percentile(ttft[bands == b], 99)) for b in sorted(set(self.bands))
            }
            out["rejected_by_band"] = dict(sorted(self.rejected_by_band.items()))
        return out


def _round(value: float) -> float:
    return float(round(float(value), 6))
