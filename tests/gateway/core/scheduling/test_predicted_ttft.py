"""The TTFT predictor's model terms, tested on the scorer itself with in-memory endpoints."""

from __future__ import annotations

import pytest

from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics
from inference_gateway.core.scheduling.gpu_priors import GPU_SECONDS_PER_PREFILL_TOKEN, gpu_priors
from inference_gateway.core.scheduling.plugins.predicted_ttft import PredictedTTFTScorer
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex
from inference_gateway.core.scheduling.registry import build_plugin
from inference_gateway.core.scheduling.types import PluginContext

H100 = GPU_SECONDS_PER_PREFILL_TOKEN["H100"]


def build() -> PredictedTTFTScorer:
    context = PluginContext(index=PrefixIndex(), priors=gpu_priors())
    scorer = build_plugin("predicted-ttft-scorer", "ttft", {}, context)
    assert isinstance(scorer, PredictedTTFTScorer)
    return scorer


def h100(name: str, waiting: int = 0) -> Endpoint:
    metrics = PodMetrics(waiting=waiting)
    return Endpoint(name, "h", 1, labels={"igw.dev/gpu": "H100"}, metrics=metrics, stale=False)


def test_a_queued_request_costs_what_queued_requests_leave_uncached() -> None:
    """Issue 24: a waiting request the picker did not send itself (the scrape's queue) is
    priced at the mean *uncached* prompt of the picks, not the mean prompt. Where most
    of every prompt is cached (chat turns, long reused contexts) the mean prompt made a
    busy pod's queue look several times longer than it was, so every first token there
    taught the pod a lower seconds-per-token and the busiest pod looked fastest."""
    scorer = build()
    busy = h100("busy")
    mean_own = 1000.0  # the scorer's starting mean, moved 1 % toward each pick's own tokens
    for i in range(300):
        request = LLMRequest(f"r{i}", "m", prompt_tokens=4000, prefix_hashes=(1,))
        request.prefix_matches = {"busy": 244}  # 244 blocks, 3,904 tokens cached: 96 to prefill
        scorer.on_picked(request, busy, now=float(i))
        scorer.on_finished(request, busy, now=float(i))
        mean_own += 0.01 * (96 - mean_own)
    request = LLMRequest("new", "m", prompt_tokens=500)
    predicted = scorer.predict(request, h100("queued", waiting=3))
    base = scorer.params.base_latency_s
    assert predicted == pytest.approx(base + H100 * (3 * mean_own + 500))
    assert predicted < base + H100 * (3 * 1000 + 500)  # well under the mean prompt's price
