"""Local rate limits: token buckets per API key and model, for requests and tokens per
minute (OpenAI's `x-ratelimit-*` headers on every answer, 429 + `Retry-After` when a
bucket is empty). One gateway replica's view; the global limit is the global router's.

A rule with no `client` (the authenticated client id) and no `apiKey` applies to each
caller separately; with no `model`, to all models.
Token limits charge the prompt estimate plus `max_tokens` (or a default) up front, as
the cost is not known until the answer ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import RateLimitSpec

__all__ = ["Bucket", "LimitDecision", "RateLimiter"]


@dataclass(slots=True)
class Bucket:
    capacity: float
    per_second: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.per_second)
        self.at = now

    def seconds_until(self, amount: float) -> float:
        missing = amount - self.level
        return 0.0 if missing <= 0 else missing / self.per_second


@dataclass(frozen=True, slots=True)
class LimitDecision:
    allowed: bool
    headers: dict[str, str]
    retry_after_s: int = 0


class RateLimiter:
    def __init__(self, rules: list[RateLimitSpec]) -> None:
        self.rules = rules
        self._buckets: dict[tuple[int, str, str, str], Bucket] = {}

    def _bucket(
        self, rule_index: int, key: str, model: str, kind: str, per_minute: int, now: float
    ) -> Bucket:
        ident = (rule_index, key, model, kind)
        bucket = self._buckets.get(ident)
        if bucket is None:
            bucket = self._buckets[ident] = Bucket(per_minute, per_minute / 60, per_minute, now)
        bucket.refill(now)
        return bucket

    def check(self, api_key: str, model: str, tokens: int, now: float) -> LimitDecision:
        """Charge one request and `tokens` if every matching bucket has room."""
        charges: list[tuple[Bucket, float, str]] = []
        for i, rule in enumerate(self.rules):
            wanted = rule.client if rule.client is not None else rule.api_key
            if wanted is not None and wanted != api_key:
                continue
            if rule.model is not None and rule.model != model:
                continue
            scope_model = model if rule.model is not None else "*"
            if rule.requests_per_minute:
                b = self._bucket(i, api_key, scope_model, "requests", rule.requests_per_minute, now)
                charges.append((b, 1.0, "requests"))
            if rule.tokens_per_minute:
                b = self._bucket(i, api_key, scope_model, "tokens", rule.tokens_per_minute, now)
                charges.append((b, float(min(tokens, rule.tokens_per_minute)), "tokens"))
        wait = max((b.seconds_until(amount) for b, amount, _ in charges), default=0.0)
        allowed = wait <= 0
        if allowed:
            for b, amount, _ in charges:
                b.level -= amount
        headers: dict[str, str] = {}
        for b, _, kind in charges:  # the tightest bucket of each kind is reported
            remaining = str(max(0, int(b.level)))
            if kind in {k.rsplit("-", 1)[-1] for k in headers} and int(
                headers[f"x-ratelimit-remaining-{kind}"]
            ) <= int(remaining):
                continue
            headers[f"x-ratelimit-limit-{kind}"] = str(int(b.capacity))
            headers[f"x-ratelimit-remaining-{kind}"] = remaining
        return LimitDecision(allowed, headers, 0 if allowed else max(1, math.ceil(wait)))
