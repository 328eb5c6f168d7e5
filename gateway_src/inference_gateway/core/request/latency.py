"""The latency figure every report computes the same way, whatever measured the times:
time per output token (the simulator's reports, the fleet report, `igw bench backends`).
"""

from __future__ import annotations

__all__ = ["time_per_output_token"]


def time_per_output_token(first_token: float, finish: float, tokens: int) -> float | None:
    """Seconds per output token after the first (vLLM's TPOT); None for an answer of one
    token or none, which has no time between tokens."""
    return (finish - first_token) / (tokens - 1) if tokens > 1 else None
