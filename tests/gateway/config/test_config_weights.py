"""`spec.weights`: the managed add-on's shortcut for the default profile's scorer weights.

A migrating team types either our plugin type names or the short camelCase names
(`queue`, `kvCache`, …); both retune the built-in default profile, a weight of 0 drops
that scorer, an unknown name or a clash with an explicit profile is an error that says
where and what to keep.
"""

from __future__ import annotations

import pytest

from inference_gateway.config.spec import SCORER_NAMES, default_scheduling
from inference_gateway.core.scheduling import Scheduler
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PodMetrics
from inference_gateway.errors import ConfigError

POOLS = {"pools": [{"name": "p", "selector": {"app": "vllm"}}]}


def weights_of(spec, profile: str = "latency") -> dict[str, float | None]:
    return {r.plugin_ref: r.weight for r in spec.profile(profile).plugins}


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, "test")
    return raised.value.problems


@pytest.mark.parametrize(
    ("name", "scorer"),
    [
        ("queue", "queue-scorer"),
        ("queueDepth", "queue-scorer"),
        ("queue-scorer", "queue-scorer"),
        ("kvCache", "kv-cache-utilization-scorer"),
        ("kvCacheUtilization", "kv-cache-utilization-scorer"),
        ("kv-cache-utilization-scorer", "kv-cache-utilization-scorer"),
        ("prefixCache", "prefix-cache-scorer"),
        ("loraAffinity", "lora-affinity-scorer"),
        ("runningRequests", "running-requests-size-scorer"),
        ("predictedTtft", "predicted-ttft-scorer"),
        ("predicted-ttft-scorer", "predicted-ttft-scorer"),
    ],
)
def test_every_spelling_sets_its_scorer_in_the_default_profile(name: str, scorer: str) -> None:
    spec = parse_config({**POOLS, "weights": {name: 4.5}}, "test")
    assert weights_of(spec)[scorer] == 4.5


def test_the_table_maps_every_name_to_a_builtin_scorer_and_covers_all_of_them() -> None:
    builtin = {p.type for p in default_scheduling()[0] if p.type.endswith("-scorer")}
    assert set(SCORER_NAMES.values()) == builtin
    assert builtin <= set(SCORER_NAMES)  # our own type names are accepted as they are


def test_unnamed_scorers_keep_their_weight_and_zero_removes_one() -> None:
    builtin = weights_of(parse_config(POOLS, "test"))
    spec = parse_config({**POOLS, "weights": {"kvCache": 0, "predictedTtft": 2}}, "test")
    got = weights_of(spec)
    assert "kv-cache-utilization-scorer" not in got
    assert got["predicted-ttft-scorer"] == 2
    assert got["precise-prefix-cache-scorer"] == builtin["precise-prefix-cache-scorer"]
    assert got["lora-affinity-scorer"] == builtin["lora-affinity-scorer"]
    assert spec.profile("latency").plugins[-1].plugin_ref == "max-score-picker"


def test_a_scorer_the_profile_lacks_joins_it_and_other_profiles_stay() -> None:
    spec = parse_config({**POOLS, "weights": {"queue": 3}}, "test")
    assert weights_of(spec)["queue-scorer"] == 3
    assert spec.profile("throughput") == default_scheduling()[1][1]


def test_weights_follow_default_profile() -> None:
    spec = parse_config(
        {**POOLS, "defaultProfile": "throughput", "weights": {"prefixCache": 9}}, "test"
    )
    assert weights_of(spec, "throughput")["prefix-cache-scorer"] == 9
    assert spec.profile("latency") == default_scheduling()[1][0]


def test_the_scheduler_scores_with_the_shortcut_weights() -> None:
    """Behaviour, not only parsing: with only the queue weighted, the idle pod wins even
    though its KV cache is fuller; with only KV weighted, the other one does."""
    pods = [
        Endpoint("busy-queue", "h", 1, metrics=PodMetrics(waiting=8, kv_usage=0.0), stale=False),
        Endpoint("busy-kv", "h", 2, metrics=PodMetrics(waiting=0, kv_usage=0.9), stale=False),
    ]
    off = {"predictedTtft": 0, "precisePrefixCache": 0, "loraAffinity": 0}
    request = LLMRequest("r", "m", prompt_tokens=10)
    by_queue = Scheduler(parse_config({"weights": {**off, "kvCache": 0, "queue": 1}}))
    by_kv = Scheduler(parse_config({"weights": {**off, "kvCache": 1}}))
    assert [s.__class__.__name__ for s, _ in by_queue.profiles["latency"].scorers] == [
        "QueueScorer"
    ]
    assert by_queue.schedule(request, pods)[0].name == "busy-kv"
    assert by_kv.schedule(request, pods)[0].name == "busy-queue"


def test_weights_survive_a_dump_and_reload() -> None:
    """The picker reads the rendered dump: it carries the weighted profile, not `weights`
    (which would clash with the profile of the same name on reload)."""
    spec = parse_config({**POOLS, "weights": {"queue": 3, "kvCache": 0}}, "test")
    dumped = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert "weights" not in dumped
    assert parse_config(dumped, "test").scheduling_profiles == spec.scheduling_profiles


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ({"queu": 1}, "weights.queu: Input should be 'queue-scorer'"),
        ({"session-affinity": 1}, "weights.session-affinity: Input should be"),
        ({"queue": -1}, "weights.queue: Input should be greater than or equal to 0"),
        ({"queue": "high"}, "weights.queue: Input should be a valid number"),
        (
            {"queue": 1, "queueDepth": 2},
            "weights: 'queue' and 'queueDepth' both name queue-scorer; keep one",
        ),
        (
            {"predictedTtft": 0, "precisePrefixCache": 0, "loraAffinity": 0, "kvCache": 0},
            "weights: every scorer of profile 'latency' is weighted 0",
        ),
    ],
)
def test_bad_weights_name_their_field(weights: dict, expected: str) -> None:
    assert any(p.startswith(expected) for p in problems({**POOLS, "weights": weights}))


def test_weights_beside_an_explicit_default_profile_say_which_to_keep() -> None:
    mine = {"name": "latency", "plugins": [{"pluginRef": "queue-scorer", "weight": 1}]}
    other = {"name": "fast", "plugins": [{"pluginRef": "queue-scorer", "weight": 1}]}
    (problem,) = problems({**POOLS, "weights": {"queue": 2}, "schedulingProfiles": [other, mine]})
    assert problem.startswith("schedulingProfiles: entry 1 ('latency') and `weights`")
    assert "move the weights into this entry and drop `weights`" in problem
    assert "drop this entry so `weights` applies to the built-in 'latency'" in problem


def test_an_explicit_profile_of_another_name_is_fine_with_weights() -> None:
    other = {"name": "fast", "plugins": [{"pluginRef": "queue-scorer", "weight": 1}]}
    spec = parse_config({**POOLS, "weights": {"queue": 2}, "schedulingProfiles": [other]}, "test")
    assert [p.name for p in spec.scheduling_profiles] == ["fast", "latency", "throughput"]
    assert weights_of(spec)["queue-scorer"] == 2


def test_a_whole_resource_reports_paths_under_spec() -> None:
    resource = {"kind": "InferenceGatewayConfig", "spec": {"weights": {"kvcache": 1}}}
    assert problems(resource)[0].startswith("spec.weights.kvcache: ")
