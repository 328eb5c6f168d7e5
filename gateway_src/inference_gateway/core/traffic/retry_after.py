"""The one Retry-After policy: a wait in, whole seconds and the header out.

Every 429 and 503 that tells a client when to come back says so through here: flow
control (the pool's drain rate, clamped to the configured `retryAfterMinS` /
`retryAfterMaxS`), both rate limiters (the local buckets and the store's Lua script,
which computes its raw wait in milliseconds), the token budget that follows an answer,
and the gateway's own "busy" answers. The rule (round a wait up to whole seconds,
never below one, at most the caller's ceiling) and the header's name and spelling live
only here, so changing what every refusal tells a client is a change to this file.

RFC 9110 §10.2.3: `Retry-After` is a non-negative decimal integer of seconds (or an
HTTP date, which this gateway never sends); the `openai` SDK honours it, so a whole
second of at least one keeps it from retrying at once into the same refusal.
"""

from __future__ import annotations

import math

__all__ = ["FLOOR_S", "HEADER", "header", "seconds", "seconds_from_ms"]

HEADER = "retry-after"
#: The least wait a refusal names: a client told 0 would come straight back.
FLOOR_S = 1


def seconds(wait_s: float, *, low: int = FLOOR_S, high: int | None = None) -> int:
    """`wait_s` as the whole seconds a client is told: rounded up, at least `low`, at
    most `high` (None: no ceiling). An unbounded wait (`math.inf`) needs a ceiling."""
    if high is not None:
        wait_s = min(wait_s, high)
    return max(low, math.ceil(wait_s))


def seconds_from_ms(wait_ms: int) -> int:
    """A wait the store's scripts measured in milliseconds, as `seconds` rounds it."""
    return seconds(wait_ms / 1000)


def header(retry_after_s: int) -> dict[str, str]:
    """The header a refusal carries (a data plane renders it as it renders every other)."""
    return {HEADER: str(retry_after_s)}
