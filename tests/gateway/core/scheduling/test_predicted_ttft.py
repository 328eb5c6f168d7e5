"""The TTFT predictor's learned speed, tested on the scorer itself with in-memory endpoints."""

from __future__ import annotations

import pytest

from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics
from inference_gateway.core.scheduling.gpu_priors import GPU_SECONDS_PER_PREFILL_TOKEN, gpu_priors
from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.plugins.predicted_ttft import PredictedTTFTScorer
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex
from inference_gateway.core.scheduling.registry import build_plugin
from inference_gateway.core.scheduling.types import PluginContext


def build() -> PredictedTTFTScorer:
    context = PluginContext(index=PrefixIndex(), priors=gpu_priors())
    scorer = build_plugin("predicted-ttft-scorer", "ttft", {}, context)
    assert isinstance(scorer, PredictedTTFTScorer)
    return scorer


def pod(name: str, gpu: str | None) -> Endpoint:
    labels = {"igw.dev/gpu": gpu} if gpu else {}
    return Endpoint(name, "h", 1, labels=labels, metrics=PodMetrics(), stale=False)


def observe(scorer: PredictedTTFTScorer, endpoint: Endpoint, ttft_s: float, n: int) -> None:
    """`n` requests of 1,000 uncached tokens on an otherwise idle `endpoint`."""
    for i in range(n):
        request = LLMRequest(f"{endpoint.name}-{i}", "m", prompt_tokens=1000)
        scorer.on_picked(request, endpoint, now=float(i))
        scorer.on_first_token(request, endpoint, ttft_s, now=i + ttft_s)


def test_pods_of_one_gpu_class_share_what_one_of_them_measured() -> None:
    """Issue 24: a speed learned per pod fell as its pod filled while identical idle pods
    kept the prior and were never picked again; pods of one GPU class now learn one
    figure, so an H100 that took no traffic predicts with what its twin measured, and
    a pod of another class keeps its own. Pods without a class label share their pool's
    figure (`test_unlabelled_pods_of_one_pool_do_not_herd`), so an unlabelled pod of
    another pool keeps its own."""
    scorer = build()
    busy, twin, a10g = pod("busy", "H100"), pod("twin", "H100"), pod("a10g", "A10G")
    alone, other = pod("alone", None), pod("other", None)
    other.pool = "another-pool"
    request = LLMRequest("new", "m", prompt_tokens=1000)
    for endpoint in (twin, a10g):  # known to the scorer before any measurement
        scorer.predict(request, endpoint)
    before = scorer.predict(request, other)  # no class: the fleet average of the priors
    observe(scorer, busy, ttft_s=0.5, n=50)  # 10x slower than the H100 prior says
    observe(scorer, alone, ttft_s=0.5, n=50)
    base = scorer.params.base_latency_s
    prior = base + 1000 * GPU_SECONDS_PER_PREFILL_TOKEN["H100"]
    assert scorer.predict(request, twin) == scorer.predict(request, busy)
    assert scorer.predict(request, twin) > 5 * prior
    assert scorer.predict(request, a10g) == pytest.approx(
        base + 1000 * GPU_SECONDS_PER_PREFILL_TOKEN["A10G"]
    )
    assert scorer.predict(request, alone) == pytest.approx(0.5, rel=0.2)
    assert scorer.predict(request, other) == before


def test_unlabelled_pods_of_one_pool_do_not_herd() -> None:
    """Three unlabelled pods of one pool, requests sent one at a time, each answered
    before the next (no backlog anywhere): when each unlabelled pod learned alone, the
    first pod picked measured a speed better than the prior the others kept and won
    every request after (27 of 27 streams on one pod through `igw serve`); sharing the
    pool's figure, the pods predict alike, and the first pod's measurement moves all
    three."""
    scorer = build()
    pods = [pod(f"p{i}", None) for i in range(3)]
    for endpoint in pods:
        endpoint.pool = "pool"
    request = LLMRequest("new", "m", prompt_tokens=1000)
    before = scorer.predict(request, pods[1])
    observe(scorer, pods[0], ttft_s=0.02, n=20)  # faster than the default prior
    predictions = {scorer.predict(request, p) for p in pods}
    assert len(predictions) == 1
    assert predictions.pop() < before


def test_under_eviction_pressure_a_request_stays_with_the_pod_that_holds_its_context() -> None:
    """A pod holding 3,904 of a 4,000-token prompt behind a 5-request queue against an
    idle pod that would rebuild it all: with no eviction seen, the idle pod is predicted
    sooner (4,000 tokens against 5,000 ahead + 96); once the KV events show every token
    the fleet computes was cached and evicted (`recompute_share` 1), each rebuilt token
    also costs half a token (`eviction_cost` 0.5) for what it evicts, and the pod with
    the context wins. A request cached nowhere pays the same price everywhere: the idle
    pod still wins it."""
    kv = KVBlockIndex()
    context = PluginContext(index=PrefixIndex(), priors=gpu_priors(), kv_index=kv)
    scorer = build_plugin("predicted-ttft-scorer", "ttft", {}, context)
    assert isinstance(scorer, PredictedTTFTScorer) and scorer.params.eviction_cost == 0.5
    holder = Endpoint("holder", "h", 1, labels={"igw.dev/gpu": "H100"},
                      metrics=PodMetrics(waiting=5), stale=False)  # fmt: skip
    idle = pod("idle", "H100")

    def ranked(matches: dict[str, int]) -> list[float]:
        request = LLMRequest("r", "m", prompt_tokens=4000, prefix_hashes=(1,))
        request.prefix_matches = matches
        return scorer.score(request, [holder, idle])

    held = {"holder": 244}  # 244 blocks of 16 tokens
    first, second = ranked(held)
    assert second > first  # no eviction seen: the idle pod
    kv.stored("p", [7])
    kv.removed("p", [7])
    kv.note_pick([7], 0, 16, 16)  # the fleet recomputes what it evicted
    assert kv.recompute_share == 1.0
    first, second = ranked(held)
    assert first > second  # the holder, despite its queue
    first, second = ranked({})
    assert second > first  # cached nowhere: the idle pod still
