"""Sliding-window rate limits per key and model, with reservations (core/traffic/ratelimit.py)."""

from __future__ import annotations

import random

import pytest

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.core.traffic.ratelimit import RateLimiter


def test_requests_per_minute_per_key_with_headers() -> None:
    limiter = RateLimiter([RateLimitSpec(requests_per_minute=2)])
    first = limiter.check("k1", "m", 10, 0, 0.0)
    assert first.allowed and first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert limiter.check("k1", "m", 10, 0, 0.5).allowed
    denied = limiter.check("k1", "m", 10, 0, 1.0)
    assert not denied.allowed and denied.retry_after_s == 60  # the first slot leaves at 61 s
    assert limiter.check("k2", "m", 10, 0, 1.0).allowed  # another key has its own bucket
    assert not limiter.check("k1", "m", 10, 0, 59.0).allowed  # a token bucket refilled here
    assert limiter.check("k1", "m", 10, 0, 61.0).allowed


def test_tokens_per_minute_scoped_to_a_model() -> None:
    limiter = RateLimiter([RateLimitSpec(model="big", tokens_per_minute=1000)])
    assert limiter.check("k", "big", 800, 0, 0.0).allowed
    denied = limiter.check("k", "big", 300, 0, 0.0)
    assert not denied.allowed and denied.headers["x-ratelimit-remaining-tokens"] == "200"
    assert limiter.check("k", "small", 10_000, 0, 0.0).allowed


def test_a_request_larger_than_the_whole_limit_is_too_large_and_leaves_nothing() -> None:
    """Defect 1: 1,024 tokens were admitted (charged min(cost, limit)) on a 200/min key."""
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=200)])
    decision = limiter.check("k", "m", 5, 1024, 0.0, request_id="r1")
    assert not decision.allowed and decision.too_large is not None
    assert (decision.too_large.limit, decision.too_large.requested) == (200, 1029)
    assert len(limiter) == 0
    # a request that set no bound is cut to fit instead (the stream extends as it goes)
    unbounded = limiter.check("k", "m", 5, 256, 0.0, request_id="r2", bounded=False)
    assert unbounded.allowed and unbounded.reserved == 195


def test_a_reservation_counts_until_settled_not_for_one_window() -> None:
    """Defect 1: a stream longer than the window lapsed out of it and the next request
    was admitted at once. A reservation holds the window until the request settles."""
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=200)])
    assert limiter.check("k", "m", 10, 150, 0.0, request_id="long").allowed
    assert not limiter.check("k", "m", 10, 50, 90.0, request_id="next").allowed  # still held
    limiter.settle("long", "k", "m", 150, 95.0)  # it delivered its 150 at the end
    assert not limiter.check("k", "m", 10, 50, 96.0, request_id="next").allowed
    assert limiter.check("k", "m", 10, 50, 157.0, request_id="next").allowed


def test_extend_grants_what_fits_all_or_nothing() -> None:
    limiter = RateLimiter(
        [RateLimitSpec(tokens_per_minute=100), RateLimitSpec(model="m", tokens_per_minute=300)]
    )
    assert limiter.check("k", "m", 10, 20, 0.0, request_id="r").allowed
    assert limiter.extend("r", "k", "m", 70, 1.0)
    assert not limiter.extend("r", "k", "m", 1, 1.0)  # the 100 limit is full
    limiter.settle("r", "k", "m", 40, 2.0)  # delivered 40 of the 90 reserved
    assert limiter.check("k", "m", 0, 0, 2.0).headers["x-ratelimit-remaining-tokens"] == "50"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_window_ever_holds_more_than_the_limit(seed: int) -> None:
    """Random requests, extensions and settles; every token counted at the moment it is
    delivered; the largest total of any window-long interval stays within the limit."""
    rng = random.Random(seed)
    limit, window = 500, 10.0
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=limit, window_s=window)])
    delivered: list[tuple[float, int]] = []
    live: dict[str, tuple[int, int]] = {}  # request -> (reserved, delivered)
    now = 0.0
    for n in range(3000):
        now += rng.expovariate(20)
        if live and rng.random() < 0.6:
            rid = rng.choice(sorted(live))
            reserved, sent = live[rid]
            step = rng.randint(1, 30)
            if sent + step > reserved and not limiter.extend(rid, "k", "m", step, now):
                limiter.settle(rid, "k", "m", sent, now)
                del live[rid]
                continue
            reserved = max(reserved, sent + step) if sent + step > reserved else reserved
            delivered.append((now, step))
            live[rid] = (reserved, sent + step)
            if rng.random() < 0.05:
                limiter.settle(rid, "k", "m", sent + step, now)
                del live[rid]
        else:
            prompt, output = rng.randint(1, 40), rng.randint(0, 120)
            if limiter.check("k", "m", prompt, output, now, request_id=f"r{n}").allowed:
                delivered.append((now, prompt))
                live[f"r{n}"] = (output, 0)
    worst = max(
        sum(c for t, c in delivered if start <= t < start + window) for start, _ in delivered
    )
    assert 0.8 * limit < worst <= limit  # busy, and never over


def test_idle_buckets_expire_and_the_count_is_capped() -> None:
    """Defect 2: a bucket per distinct bearer token, never pruned, keyed by the token."""
    limiter = RateLimiter([RateLimitSpec(requests_per_minute=5, window_s=10)], max_buckets=500)
    evicted: list[int] = []
    limiter.on_evict = evicted.append
    token = "x" * 8000
    for i in range(400):
        assert limiter.check(f"{token}{i}", "m", 1, 0, 0.0).allowed
    assert len(limiter) == 400
    assert all(len(key) == 16 for key in limiter._buckets)  # a digest, never the token
    for i in range(40):  # a window later, later requests sweep the idle ones away
        limiter.check("steady", "m", 1, 0, 11.0 + i * 0.001)
    assert len(limiter) == 1
    for i in range(600):
        limiter.check(f"flood{i}", "m", 1, 0, 20.0)
    assert len(limiter) == 500 and sum(evicted) == 101


def test_a_bucket_held_by_a_long_request_is_not_swept() -> None:
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=100, window_s=10)])
    assert limiter.check("k", "m", 1, 90, 0.0, request_id="long").allowed
    for i in range(10):
        limiter.check(f"other{i}", "m", 1, 0, 30.0)
    assert not limiter.check("k", "m", 1, 20, 30.0, request_id="x").allowed


def test_a_negative_charge_is_refused() -> None:
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=1000)])
    with pytest.raises(ValueError, match="negative"):
        limiter.check("k", "m", -5, 0, 0.0)
