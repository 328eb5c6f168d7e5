"""Token-bucket rate limits per key and model."""

from __future__ import annotations

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.core.traffic.ratelimit import RateLimiter


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


def test_settling_refunds_an_overestimate_and_takes_an_underestimate() -> None:
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=1000)])
    assert limiter.check("k", "m", 900, 0.0).allowed
    limiter.settle("k", "m", charged=900, used=12, now=0.0)
    level = limiter.check("k", "m", 0, 0.0).headers["x-ratelimit-remaining-tokens"]
    assert level == "988"  # 1000 - 12: the unused 888 came back
    limiter.settle("k", "m", charged=0, used=500, now=0.0)  # larger than charged: taken
    assert limiter.check("k", "m", 0, 0.0).headers["x-ratelimit-remaining-tokens"] == "488"


def test_settling_never_fills_a_bucket_past_its_capacity() -> None:
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=1000)])
    limiter.check("k", "m", 10, 0.0)
    limiter.settle("k", "m", charged=10_000, used=0, now=30.0)
    assert limiter.check("k", "m", 0, 30.0).headers["x-ratelimit-remaining-tokens"] == "1000"


def test_a_negative_charge_is_refused() -> None:
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=1000)])
    try:
        limiter.check("k", "m", -5, 0.0)
    except ValueError as error:
        assert "negative" in str(error)
    else:
        raise AssertionError("a negative charge was accepted")
