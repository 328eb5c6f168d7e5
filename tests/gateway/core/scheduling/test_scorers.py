"""Scorer formulas pinned to DESIGN §3, and picker properties."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.plugins.kv_cache import KVCacheScorer
from inference_gateway.core.scheduling.plugins.lora import LoraAffinityScorer
from inference_gateway.core.scheduling.plugins.prefix import PrefixCacheScorer, PrefixIndex
from inference_gateway.core.scheduling.plugins.queue import QueueScorer
from inference_gateway.core.scheduling.registry import (
    PLUGIN_TYPES,
    build_plugin,
    register_scorer,
    validation_context,
)
from inference_gateway.errors import ConfigError, NoEndpointError


def ep(name: str, **metrics: object) -> Endpoint:
    return Endpoint(name, "127.0.0.1", 8000, metrics=PodMetrics(**metrics), stale=False)  # type: ignore[arg-type]


REQ = LLMRequest("r", "m", prompt_tokens=64)


@pytest.mark.parametrize(
    ("queues", "expected"),
    [([0, 5, 10], [1.0, 0.5, 0.0]), ([3, 3], [1.0, 1.0]), ([2, 4], [1.0, 0.0])],
)
def test_queue_scorer_is_upstream_minmax(queues: list[int], expected: list[float]) -> None:
    scores = QueueScorer().score(REQ, [ep(f"p{i}", waiting=q) for i, q in enumerate(queues)])
    assert scores == pytest.approx(expected)


def test_queue_scorer_counts_inflight_when_asked() -> None:
    a, b = ep("a", waiting=1), ep("b", waiting=1)
    a.sent_requests = 4
    assert QueueScorer(count_inflight=True).score(REQ, [a, b]) == [0.0, 1.0]
    assert QueueScorer(count_inflight=False).score(REQ, [a, b]) == [1.0, 1.0]


def test_kv_scorer_is_one_minus_usage() -> None:
    assert KVCacheScorer().score(REQ, [ep("a", kv_usage=0.25), ep("b", kv_usage=0.9)]) == (
        pytest.approx([0.75, 0.1])
    )


def test_lora_affinity_levels() -> None:
    request = LLMRequest("r", "sql", adapter="sql")
    pods = [
        ep("active", running_adapters=frozenset({"sql"}), max_loras=2),
        ep("free", running_adapters=frozenset({"x"}), max_loras=2),
        ep(
            "waiting",
            running_adapters=frozenset({"x"}),
            waiting_adapters=frozenset({"sql"}),
            max_loras=2,
        ),
        ep("full", running_adapters=frozenset({"x", "y"}), max_loras=2),
    ]
    assert LoraAffinityScorer().score(request, pods) == [1.0, 0.8, 0.6, 0.0]


def test_prefix_score_is_matched_over_total_blocks() -> None:
    index = PrefixIndex()
    index.add("a", [1, 2, 3])
    index.add("b", [1, 9])
    request = LLMRequest("r", "m", prompt_tokens=64, prefix_hashes=(1, 2, 3, 4))
    scores = PrefixCacheScorer("p", index).score(request, [ep("a"), ep("b"), ep("c")])
    assert scores == pytest.approx([0.75, 0.25, 0.0])


def test_prefix_index_evicts_lru_per_pod_tail_blocks_first() -> None:
    index = PrefixIndex()
    index.set_capacity("a", 3)
    index.add("a", [1, 2, 3])
    index.add("a", [4])  # one block over capacity: the older chain loses its tail block
    assert index.matches([1, 2, 3]) == {"a": 2}
    assert index.matches([4]) == {"a": 1}
    index.add("a", [5, 6])  # two more: the older chain goes, its tail block first
    assert index.matches([1, 2, 3]) == {}
    assert index.matches([5, 6, 7]) == {"a": 2}
    index.forget("a")
    assert index.matches([5]) == {}


def test_prefix_index_matches_equal_a_linear_scan() -> None:
    rnd = random.Random(5)
    index = PrefixIndex()
    chains = [[rnd.getrandbits(64) for _ in range(rnd.randint(1, 40))] for _ in range(30)]
    for pod in ("a", "b", "c"):
        index.set_capacity(pod, rnd.randint(20, 200))
    for _ in range(300):  # requests share chains' heads, as prompts share system prompts
        chain = rnd.choice(chains)
        index.add(rnd.choice("abc"), chain[: rnd.randint(1, len(chain))])
    for chain in chains:
        expected = {}
        for pod, lru in index._lru.items():
            depth = 0
            while depth < len(chain) and chain[depth] in lru:
                depth += 1
            if depth:
                expected[pod] = depth
        assert index.matches(chain) == expected


def test_every_registered_type_builds_from_empty_parameters() -> None:
    """Each type's defaults are a working plugin of its registered kind."""
    method = {
        "filter": "filter",
        "scorer": "score",
        "picker": "pick",
        "decider": "decide",
        "profile-handler": "prefill_profile_for",
    }
    assert len(PLUGIN_TYPES) >= 7
    for type_name, plugin_type in PLUGIN_TYPES.items():
        plugin = build_plugin(type_name, type_name, {}, validation_context())
        assert plugin.name == type_name
        assert callable(getattr(plugin, method[plugin_type.kind]))


def test_registering_twice_fails_and_bad_parameters_name_the_field() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register_scorer(
            "queue-scorer", PLUGIN_TYPES["queue-scorer"].params, lambda *a: QueueScorer()
        )
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.parameters\.bogus"):
        parse_config({"plugins": [{"type": "queue-scorer", "parameters": {"bogus": 1}}]})


def test_no_eligible_endpoint_raises() -> None:
    stale = ep("a")
    stale.stale = True
    with pytest.raises(NoEndpointError):
        Scheduler(GatewayConfigSpec()).schedule(REQ, [stale])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 50), st.floats(0, 1), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["latency", "throughput"]),
)
def test_picker_never_picks_stale_or_filtered(
    pods: list[tuple[bool, int, float, bool]], profile: str
) -> None:
    endpoints = []
    for i, (stale, waiting, kv, serves) in enumerate(pods):
        e = ep(f"p{i}", waiting=waiting, kv_usage=kv)
        e.stale = stale
        e.models = frozenset({"m"} if serves else {"other"})
        endpoints.append(e)
    request = LLMRequest("r", "m", prompt_tokens=100, profile=profile)
    scheduler = Scheduler(GatewayConfigSpec(), seed=1)
    allowed = [e for e in endpoints if not e.stale and "m" in e.models]
    if not allowed:
        with pytest.raises(NoEndpointError):
            scheduler.schedule(request, endpoints)
        return
    ranked = scheduler.schedule(request, endpoints)
    assert ranked[0] in allowed
    assert set(ranked) <= set(allowed)
