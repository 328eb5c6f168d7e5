"""`pools[].selector`: the plain map (matchLabels) or a full Kubernetes LabelSelector.

The rules are the API server's (kubernetes.io "Labels and Selectors" and the
LabelSelectorRequirement reference): `In`/`NotIn` need values, `Exists`/`DoesNotExist`
take none, keys are an optional DNS-subdomain prefix and a 63-character name, values are
at most 63 characters; `NotIn` also matches a pod without the key; requirements are ANDed.
"""

from __future__ import annotations

import pytest

from inference_gateway.config.spec import LabelSelector
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.errors import ConfigError

FULL = {
    "matchLabels": {"app": "vllm"},
    "matchExpressions": [
        {"key": "igw.dev/gpu", "operator": "In", "values": ["H100", "A100"]},
        {"key": "tier", "operator": "NotIn", "values": ["canary"]},
        {"key": "igw.dev/pool", "operator": "Exists"},
        {"key": "draining", "operator": "DoesNotExist"},
    ],
}


def selector_of(selector: object) -> LabelSelector:
    return parse_config({"pools": [{"name": "p", "selector": selector}]}, "t").pools[0].selector


def problems(selector: object) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        selector_of(selector)
    return raised.value.problems


def test_the_plain_map_is_match_labels() -> None:
    selector = selector_of({"app": "vllm", "igw.dev/pool": "chat"})
    assert selector.match_labels == {"app": "vllm", "igw.dev/pool": "chat"}
    assert selector.match_expressions == []
    assert selector == selector_of({"matchLabels": {"app": "vllm", "igw.dev/pool": "chat"}})


@pytest.mark.parametrize(
    ("labels", "selected"),
    [
        ({"app": "vllm", "igw.dev/gpu": "H100", "igw.dev/pool": "x"}, True),
        ({"app": "vllm", "igw.dev/gpu": "A100", "igw.dev/pool": "x", "tier": "main"}, True),
        ({"app": "vllm", "igw.dev/gpu": "A10G", "igw.dev/pool": "x"}, False),  # In
        ({"app": "vllm", "igw.dev/gpu": "H100", "igw.dev/pool": "x", "tier": "canary"}, False),
        ({"app": "vllm", "igw.dev/gpu": "H100"}, False),  # Exists
        ({"app": "vllm", "igw.dev/gpu": "H100", "igw.dev/pool": "x", "draining": ""}, False),
        ({"app": "sglang", "igw.dev/gpu": "H100", "igw.dev/pool": "x"}, False),  # matchLabels
    ],
)
def test_every_operator_matches_as_kubernetes_does(labels: dict, selected: bool) -> None:
    assert selector_of(FULL).matches(labels) is selected


def test_an_empty_selector_selects_everything() -> None:
    assert selector_of({}).selects_everything and selector_of({}).matches({"any": "pod"})
    assert not selector_of(FULL).selects_everything


def dumped_selector(given: object) -> tuple[object, bool]:
    """(the selector as a dump writes it, whether the dump reloads to the same pools)."""
    spec = parse_config({"pools": [{"name": "p", "selector": given}]}, "t")
    dumped = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped["pools"][0]["selector"], parse_config(dumped, "t").pools == spec.pools


def test_a_selector_without_expressions_dumps_as_the_plain_map() -> None:
    """The plain map is what a picker of the previous release (plain map only) still
    reads from a rendered config during a rollout."""
    assert dumped_selector({"matchLabels": {"app": "vllm"}}) == ({"app": "vllm"}, True)


def test_a_selector_with_expressions_dumps_in_full() -> None:
    selector, reloads = dumped_selector(FULL)
    assert selector["matchLabels"] == FULL["matchLabels"] and reloads
    assert [(e["key"], e["operator"], e["values"]) for e in selector["matchExpressions"]] == [
        (e["key"], e["operator"], e.get("values", [])) for e in FULL["matchExpressions"]
    ]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "pools[0].selector.matchExpressions[0].values: must be non-empty when operator is In",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]},
            "pools[0].selector.matchExpressions[0].values: must be non-empty when operator "
            "is NotIn",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "pools[0].selector.matchExpressions[0].values: must be empty when operator is Exists",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
            "pools[0].selector.matchExpressions[0].values: must be empty when operator is "
            "DoesNotExist",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            "pools[0].selector.matchExpressions[0].operator: Input should be 'In', 'NotIn', "
            "'Exists' or 'DoesNotExist'",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"], "x": 1}]},
            "pools[0].selector.matchExpressions[0].x: Extra inputs are not permitted",
        ),
        (
            {"matchExpressions": [{"key": "-a", "operator": "Exists"}]},
            "pools[0].selector.matchExpressions[0].key: '-a': a label name is",
        ),
        (
            {"matchExpressions": [{"key": "Bad_Prefix/a", "operator": "Exists"}]},
            "pools[0].selector.matchExpressions[0].key: 'Bad_Prefix/a': the prefix",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["a,b"]}]},
            "pools[0].selector.matchExpressions[0].values[0]: 'a,b': a label value is",
        ),
        ({"app name": "vllm"}, "pools[0].selector.matchLabels.app name: 'app name': a label"),
        ({"app": "v" * 64}, "pools[0].selector.matchLabels.app: '" + "v" * 64),
        ({"x": "1", "matchLabels": {"a": "b"}}, "pools[0].selector.x: Extra inputs"),
        ({"app": 5}, "pools[0].selector.matchLabels.app: Input should be a valid string"),
        ({"matchLabels": "app=vllm"}, "pools[0].selector.matchLabels: Input should be a valid"),
    ],
)
def test_bad_selectors_name_their_field(selector: object, expected: str) -> None:
    found = problems(selector)
    assert any(p.startswith(expected) for p in found), found


@pytest.mark.parametrize(
    "key", ["app", "igw.dev/pool", "a" * 63, "x.y-z_1", f"{'a' * 63}.example.com/name"]
)
def test_keys_the_api_server_accepts_are_accepted(key: str) -> None:
    assert selector_of({key: "v"}).match_labels == {key: "v"}
