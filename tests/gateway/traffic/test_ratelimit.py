"""Token-bucket rate limits per key and model."""

from __future__ import annotations

from inference_gateway.config import RateLimitSpec
from inference_gateway.traffic.ratelimit import RateLimiter


def test_requests_per_minute_per_key_with_headers() -> None:
    limiter = RateLimiter([RateLimitSpec(requests_per_minute=2)])
    first = limiter.check("k1", "m", 10, 0.0)
    assert first.allowed and first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert limiter.check("k1", "m", 10, 0.0).allowed
    denied = limiter.check("k1", "m", 10, 0.0)
    assert not denied.allowed and denied.retry_after_s == 30
    assert limiter.check("k2", "m", 10, 0.0).allowed  # another key has its own bucket
    assert limiter.check("k1", "m", 10, 30.0).allowed  # refilled


def test_tokens_per_minute_scoped_to_a_model() -> None:
    limiter = RateLimiter([RateLimitSpec(model="big", tokens_per_minute=1000)])
    assert limiter.check("k", "big", 800, 0.0).allowed
    denied = limiter.check("k", "big", 800, 0.0)
    assert not denied.allowed and denied.headers["x-ratelimit-remaining-tokens"] == "200"
    assert limiter.check("k", "small", 10_000, 0.0).allowed
