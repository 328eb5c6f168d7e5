"""`no-hit-lru-scorer`, llm-d's scorer of that type (llm-d/llm-d-inference-scheduler
`pkg/plugins/scorer/no_hit_lru.go`): cold requests go round the pods least recently given
one, hits are left to the prefix scorer (0.5 for all); the managed add-on's `lru` weight."""

from __future__ import annotations

import pytest

from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.plugins.no_hit_lru import NoHitLRUScorer
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex


def ep(name: str) -> Endpoint:
    return Endpoint(name, "127.0.0.1", 8000, metrics=PodMetrics(), stale=False)


def cold(i: int) -> LLMRequest:
    return LLMRequest(f"r{i}", "m", prompt_tokens=64, prefix_hashes=(1000 + i,))


def test_cold_requests_rank_never_used_then_least_recent() -> None:
    index = PrefixIndex()
    scorer = NoHitLRUScorer("lru", index)
    pods = [ep("a"), ep("b"), ep("c")]
    assert scorer.score(cold(0), pods) == pytest.approx([1.0, 0.5, 0.0])  # all never used
    scorer.on_picked(cold(0), pods[0], 0.0)  # a: most recent
    assert scorer.score(cold(1), pods) == pytest.approx([0.0, 1.0, 0.5])
    scorer.on_picked(cold(1), pods[1], 0.0)
    scorer.on_picked(cold(2), pods[2], 0.0)  # order now a, b, c (a least recent)
    assert scorer.score(cold(3), pods) == pytest.approx([1.0, 0.5, 0.0])


def test_a_request_with_a_hit_is_neutral_and_does_not_move_the_order() -> None:
    index = PrefixIndex()
    index.add("b", [7, 8])
    scorer = NoHitLRUScorer("lru", index)
    pods = [ep("a"), ep("b")]
    warm = LLMRequest("w", "m", prompt_tokens=64, prefix_hashes=(7, 8, 9))
    assert scorer.score(warm, pods) == [0.5, 0.5]
    scorer.on_picked(warm, pods[1], 0.0)
    assert scorer.score(cold(0), pods) == pytest.approx([1.0, 0.0])  # nothing recorded


def test_one_candidate_scores_one_and_the_order_is_bounded() -> None:
    scorer = NoHitLRUScorer("lru", PrefixIndex(), lru_size=2)
    assert scorer.score(cold(0), [ep("a")]) == [1.0]
    for i, name in enumerate("abc"):
        scorer.on_picked(cold(i), ep(name), 0.0)
    assert list(scorer._recent) == ["b", "c"]


def test_the_lru_weight_spreads_cold_requests_through_the_scheduler() -> None:
    """`weights: {lru: …}` (the managed name) adds the scorer to the default profile; with
    everything else equal, cold requests then visit every pod before any pod twice."""
    config = parse_config(
        {
            "pools": [{"name": "p", "selector": {"app": "m"}}],
            "models": [{"name": "m", "pool": "p"}],
            "weights": {"lru": 10},
        }
    )
    scheduler = Scheduler(config)
    pods = [ep(n) for n in ("a", "b", "c", "d")]
    chosen = []
    for i in range(8):
        request = cold(i)
        (pod, *_) = scheduler.schedule(request, pods)
        scheduler.on_picked(request, pod, float(i))
        scheduler.on_finished(request, pod, float(i))
        chosen.append(pod.name)
    assert sorted(chosen[:4]) == ["a", "b", "c", "d"] and chosen[4:] == chosen[:4]
