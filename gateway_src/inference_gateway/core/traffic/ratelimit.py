"""Local rate limits: token buckets per API key and model, for requests and tokens per
minute (OpenAI's `x-ratelimit-*` headers on every answer, 429 + `Retry-After` when a
bucket is empty). One gateway replica's view; the global limit is the global router's.

A rule with no `client` (the authenticated client id) and no `apiKey` applies to each
caller separately; with no `model`, to all models.
Token limits charge the prompt estimate plus the largest output bound the request sets
(or a default) up front, as the cost is not known until the answer ends; `settle` then
corrects the charge to the answer's `usage` (a refund, or more taken when it was larger).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inference_gateway.config.spec import RateLimitSpec

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

    def _matching(self, api_key: str, model: str) -> list[tuple[int, RateLimitSpec, str]]:
        """(rule index, rule, the model its buckets are scoped to) of every rule that applies."""
        return [
            (i, rule, model if rule.model is not None else "*")
            for i, rule in enumerate(self.rules)
            if (rule.client if rule.client is not None else rule.api_key) in (None, api_key)
            and (rule.model is None or rule.model == model)
        ]

    def check(self, api_key: str, model: str, tokens: int, now: float) -> LimitDecision:
        """Charge one request and `tokens` if every matching bucket has room."""
        if tokens < 0:
            raise ValueError(f"a token charge cannot be negative ({tokens})")
        charges: list[tuple[Bucket, float, str]] = []
        for i, rule, scope_model in self._matching(api_key, model):
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

    def settle(self, api_key: str, model: str, charged: int, used: int, now: float) -> None:
        """Correct an earlier `check(..., charged, ...)` to the `used` tokens the answer
        reported: the difference goes back into (or comes out of) each token bucket."""
        for i, rule, scope_model in self._matching(api_key, model):
            if not rule.tokens_per_minute:
                continue
            bucket = self._buckets.get((i, api_key, scope_model, "tokens"))
            if bucket is None:
                continue
            bucket.refill(now)
            cap = rule.tokens_per_minute
            bucket.level = min(bucket.capacity, bucket.level + min(charged, cap) - min(used, cap))
