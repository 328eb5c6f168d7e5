"""core/request/budget.py: tokens counted as a stream passes, whatever the chunking;
growth all or nothing against the local limiter; settled once, from usage or the count.
(The budget's backend reads the monotonic clock, so the limiter is driven on it too.)"""

from __future__ import annotations

import time

import orjson

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.core.request.budget import LocalBackend, TokenBudget, grow_step
from inference_gateway.core.traffic.ratelimit import RateLimiter


def events(n: int, choices: int = 1) -> bytes:
    chunk = {
        "choices": [{"index": i, "text": "tok", "finish_reason": None} for i in range(choices)]
    }
    return b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for _ in range(n))


def test_counting_does_not_depend_on_how_the_stream_is_cut() -> None:
    stream = events(37, choices=2) + b'data: {"choices":[],"usage":{"total_tokens":80}}\n\n'
    for size in (1, 7, 15, 16, 64, len(stream)):
        budget = TokenBudget(LocalBackend(RateLimiter([]), "r", "c", "m", 0), 0, 10_000, 16)
        for i in range(0, len(stream), size):
            budget.count(stream[i : i + size])
        assert budget.counted == 74, size


async def test_a_stream_grows_its_reservation_until_the_window_is_full() -> None:
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=100)])
    decision = limiter.check("c", "m", 10, 20, time.monotonic(), request_id="r")
    assert decision.allowed and decision.reserved == 20
    budget = TokenBudget(LocalBackend(limiter, "r", "c", "m", 10), 10, 20, grow_step(100))
    delivered = 0
    for _ in range(200):
        if budget.count(events(1)) and not await budget.grow():
            break
        delivered += 1
    assert delivered == 90  # 100 minus the prompt's 10: never more
    assert budget.counted == 90  # the refused chunk is not delivered, nor counted
    budget.close(None)  # settles prompt + counted; the reservation goes
    assert (
        limiter.check("c", "m", 0, 0, time.monotonic()).headers["x-ratelimit-remaining-tokens"]
        == "0"
    )
    assert limiter.extend("other", "c", "m", 1, time.monotonic()) is False
    budget.close(5)  # once only: a second close would have refunded 95
    assert limiter.extend("other", "c", "m", 1, time.monotonic()) is False


def test_usage_settles_and_the_unused_reservation_comes_back() -> None:
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=100)])
    assert limiter.check("c", "m", 10, 80, time.monotonic(), request_id="r").allowed
    budget = TokenBudget(LocalBackend(limiter, "r", "c", "m", 10), 10, 80, 16)
    budget.count(events(5))
    budget.close(25)  # the answer's usage: 25 in all (15 more than the prompt charge)
    assert (
        limiter.check("c", "m", 0, 0, time.monotonic()).headers["x-ratelimit-remaining-tokens"]
        == "75"
    )


async def test_a_whole_answer_is_judged_by_its_usage() -> None:
    """`admit_whole` (igw serve, igw picker, igw global): an answer whose usage fits the
    window passes; one over it is refused, counts nothing, and says when it would fit."""
    limiter = RateLimiter([RateLimitSpec(tokens_per_minute=100)])
    assert limiter.check("c", "m", 10, 20, time.monotonic(), request_id="r").allowed
    budget = TokenBudget(LocalBackend(limiter, "r", "c", "m", 10), 10, 20, grow_step(100))
    assert await budget.admit_whole(orjson.dumps({"usage": {"completion_tokens": 15}}))
    assert await budget.admit_whole(b"not json")  # no usage to judge: let through
    assert not await budget.admit_whole(orjson.dumps({"usage": {"completion_tokens": 95}}))
    assert budget.counted == 0 and budget.refused == 75  # 95 wanted, 20 reserved: none sent
    assert 1 <= budget.retry_after_s() <= 61  # the prompt's 10 leave within the window
    budget.close(None)
