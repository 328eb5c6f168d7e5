"""Cost per million output tokens from an hourly price and a measured token rate.

    cost = hourly_usd ÷ (tokens_per_s × 3,600) × 10⁶

One instance serving one stream at `tokens_per_s` produces `tokens_per_s × 3,600` tokens
an hour; dividing its hourly price by that gives the price of one token. Known data points
(tests/gateway/backend_bench/test_bench_cost.py): $0.8048/h at 131.5 tok/s → $1.70; $0.556/h at
37.2 tok/s → $4.15; $0.7582/h at 36.4 tok/s → $5.79; $1.3438/h at 37.1 tok/s → $10.06.
"""

from __future__ import annotations

import math

__all__ = ["SECONDS_PER_HOUR", "cost_per_million_tokens"]

SECONDS_PER_HOUR = 3600


def cost_per_million_tokens(hourly_usd: float, tokens_per_s: float) -> float | None:
    """USD per 10⁶ output tokens; `None` when the rate is zero or unknown (no division)."""
    if not math.isfinite(tokens_per_s) or tokens_per_s <= 0 or hourly_usd < 0:
        return None
    return hourly_usd / (tokens_per_s * SECONDS_PER_HOUR) * 1e6
