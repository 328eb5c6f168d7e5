"""The picker's pending-prefill bookkeeping on each endpoint, which the saturation
detector reads: prompt tokens sent without a first token yet, and the measured speed."""

from __future__ import annotations

import pytest

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler


def request(rid: str, tokens: int) -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", prompt_tokens=tokens)


@pytest.fixture
def setup() -> tuple[Scheduler, Endpoint]:
    scheduler = Scheduler(GatewayConfigSpec(), priors={})
    return scheduler, Endpoint("a", "h", 1, metrics=PodMetrics(), stale=False)


def test_pending_prefill_counts_until_first_token_and_survives_scrapes(setup) -> None:
    scheduler, pod = setup
    first, second = request("1", 2000), request("2", 1000)
    scheduler.on_picked(first, pod, 0.0)
    scheduler.on_picked(second, pod, 0.0)
    assert pod.prefill_tokens == 3000
    pod.sent_requests, pod.scrape_seq = 0, pod.scrape_seq + 1  # a scrape saw both
    assert pod.prefill_tokens == 3000  # prefilling is invisible in `waiting`: still counted
    scheduler.on_first_token(first, pod, 0.08, 0.08)
    assert pod.prefill_tokens == 1000
    scheduler.on_finished(first, pod, 0.2)
    scheduler.on_finished(second, pod, 0.2)  # ended (or failed) before its first token
    assert pod.prefill_tokens == 0 and pod.inflight == 0


def test_prefill_speed_is_learned_from_ttft_over_tokens_ahead(setup) -> None:
    scheduler, pod = setup
    assert pod.prefill_s_per_token == 0.0  # unmeasured: the detector's term stays off
    a, b = request("a", 2000), request("b", 2000)
    scheduler.on_picked(a, pod, 0.0)
    scheduler.on_picked(b, pod, 0.0)  # dispatched behind a: 4000 tokens to its first token
    scheduler.on_first_token(a, pod, 0.08, 0.08)
    assert pod.prefill_s_per_token == pytest.approx(0.08 / 2000)
    scheduler.on_first_token(b, pod, 0.16, 0.16)
    assert pod.prefill_s_per_token == pytest.approx((0.08 * 0.98 + 0.16) / (2000 * 0.98 + 4000))
    scheduler.on_finished(a, pod, 0.3)
    scheduler.on_finished(b, pod, 0.3)
    assert pod.prefill_tokens == 0
