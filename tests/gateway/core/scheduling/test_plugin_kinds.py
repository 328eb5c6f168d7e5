"""Plugins are what their registered type says (filter, scorer, picker), never what their
name or their methods suggest, and a config with a bad plugin fails in `parse_config`.

The rules are the upstream endpoint picker's (kubernetes-sigs/gateway-api-inference-
extension, `pkg/epp/scheduling/framework/scheduler_profile.go`, `AddPlugins`): a plugin
joins a profile by the interfaces it implements, a scorer without a weight is an error,
and a second picker is an error, not a silent replacement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from inference_gateway.config.spec import SCORER_TYPES, default_scheduling, parse_spec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.plugins.prefix import PrefixCacheScorer
from inference_gateway.core.scheduling.registry import (
    PLUGIN_TYPES,
    build_plugin,
    kind_of,
    register_filter,
    register_picker,
    register_scorer,
    validation_context,
)
from inference_gateway.core.scheduling.types import PluginContext
from inference_gateway.errors import ConfigError, NoEndpointError

POOLS = {
    "pools": [{"name": "p", "selector": {"matchLabels": {"app": "m"}}}],
    "models": [{"name": "m", "pool": "p"}],
}


class FirstPicker:
    """Keeps the candidates' order: the first one wins, whatever the scores."""

    def __init__(self, name: str) -> None:
        self.name = name

    def pick(
        self, request: LLMRequest, endpoints: list[Endpoint], scores: list[float]
    ) -> list[Endpoint]:
        return list(endpoints)


class Favourite:
    """Scores one pod (by name) 1 and every other 0."""

    def __init__(self, name: str, pod: str = "b") -> None:
        self.name, self.pod = name, pod

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        return [1.0 if e.name == self.pod else 0.0 for e in endpoints]


class NotA:
    """Drops the pod named `a`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def filter(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        return [e for e in endpoints if e.name != "a"]


class Renamed(PrefixCacheScorer):
    """A prefix scorer under another class name."""


class NoParams(Params):
    pass


@pytest.fixture
def register() -> Iterator[Callable[..., None]]:
    """Register test types; they leave the registry after the test."""
    added: list[str] = []

    def add(how: Callable[..., None], name: str, factory: Callable[..., Any], **kw: Any) -> None:
        how(name, NoParams, factory, **kw)
        added.append(name)

    yield add
    for name in added:
        PLUGIN_TYPES.pop(name)


def pods(*names: str) -> list[Endpoint]:
    return [
        Endpoint(n, "10.0.0.1", 8000 + i, metrics=PodMetrics(), stale=False)
        for i, n in enumerate(names)
    ]


def profile(*refs: dict[str, Any]) -> dict[str, Any]:
    return {
        **POOLS,
        "defaultProfile": "custom",
        "schedulingProfiles": [{"name": "custom", "plugins": list(refs)}],
    }


def test_a_picker_without_the_suffix_is_still_a_second_picker(
    register: Callable[..., None],
) -> None:
    """Before: a picker type not ending in `-picker` passed validation and silently
    replaced the profile's first picker."""
    register(register_picker, "first-endpoint", lambda name, params, ctx: FirstPicker(name))
    config = profile({"pluginRef": "max-score-picker"}, {"pluginRef": "first-endpoint"})
    config["plugins"] = [{"type": "first-endpoint"}]
    with pytest.raises(
        ConfigError,
        match=r"Profiles\[0\]\.plugins\[1\]\.pluginRef: 'first-endpoint' is a second picker",
    ):
        parse_config(config)


def test_a_picker_is_used_by_its_kind(register: Callable[..., None]) -> None:
    register(register_picker, "first-endpoint", lambda name, params, ctx: FirstPicker(name))
    register(register_scorer, "favourite", lambda name, params, ctx: Favourite(name))
    config = profile({"pluginRef": "favourite", "weight": 1}, {"pluginRef": "first-endpoint"})
    config["plugins"] = [{"type": "first-endpoint"}, {"type": "favourite"}]
    scheduler = Scheduler(parse_config(config))
    assert isinstance(scheduler.profiles["custom"].picker, FirstPicker)
    ranked = scheduler.schedule(LLMRequest("r", "m"), pods("a", "b"))
    assert [e.name for e in ranked] == ["a", "b"]  # the scorer prefers b; the picker rules


def test_a_scorer_without_a_weight_is_a_config_error(register: Callable[..., None]) -> None:
    """Before: a scorer type not ending in `-scorer` passed validation, and the scheduler
    then raised ValueError."""
    register(register_scorer, "favourite", lambda name, params, ctx: Favourite(name))
    config = profile({"pluginRef": "favourite"})
    config["plugins"] = [{"type": "favourite"}]
    with pytest.raises(
        ConfigError, match=r"schedulingProfiles\[0\]\.plugins\[0\]\.weight: a scorer needs a weight"
    ):
        parse_config(config)


def test_bad_parameters_and_unknown_types_fail_in_parse_config() -> None:
    """Before: `parse_config` accepted both; only building a scheduler found them."""
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.parameters\.bogus: Extra inputs"):
        parse_config({"plugins": [{"type": "lora-affinity-scorer", "parameters": {"bogus": 1}}]})
    with pytest.raises(ConfigError, match=r"plugins\[1\]\.parameters\.maxNumOfEndpoints"):
        parse_config(
            {
                "plugins": [
                    {"type": "queue-scorer"},
                    {"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 0}},
                ]
            }
        )
    with pytest.raises(
        ConfigError, match=r"plugins\[0\]\.type: unknown plugin type 'random-picker'"
    ):
        parse_config({"plugins": [{"type": "random-picker"}]})


def test_upstream_parameter_names_are_accepted() -> None:
    """GIE's plugin parameters are camelCase (`blockSize`, `maxNumOfEndpoints`)."""
    config = parse_config(
        {"plugins": [{"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 2}}]}
    )
    scheduler = Scheduler(config)
    ranked = scheduler.schedule(LLMRequest("r", "m"), pods("a", "b", "c"))
    assert len(ranked) == 2


def test_the_prefix_index_follows_the_registry_not_the_class_name(
    register: Callable[..., None],
) -> None:
    """Before: the scheduler kept its prefix index only for two class names, so a prefix
    scorer of another class scored against an index nobody filled."""
    register(
        register_scorer,
        "renamed-prefix",
        lambda name, params, ctx: Renamed(name, ctx.index),
        uses_prefix_index=True,
    )
    config = profile(
        {"pluginRef": "renamed-prefix", "weight": 1}, {"pluginRef": "max-score-picker"}
    )
    config["plugins"] = [{"type": "renamed-prefix"}]
    scheduler = Scheduler(parse_config(config))
    assert scheduler.uses_prefix
    a, b = pods("a", "b")
    first = LLMRequest("r1", "m", prompt_tokens=64, prefix_hashes=[1, 2, 3, 4])
    scheduler.on_picked(first, b, 0.0)
    again = LLMRequest("r2", "m", prompt_tokens=64, prefix_hashes=[1, 2, 3, 4])
    assert scheduler.schedule(again, [a, b])[0].name == "b"


def test_filters_run_before_scoring(register: Callable[..., None]) -> None:
    register(register_filter, "not-a", lambda name, params, ctx: NotA(name))
    config = profile({"pluginRef": "not-a"}, {"pluginRef": "queue-scorer", "weight": 1})
    config["plugins"] = [{"type": "not-a"}]
    scheduler = Scheduler(parse_config(config))
    assert [e.name for e in scheduler.schedule(LLMRequest("r", "m"), pods("a", "b"))] == ["b"]
    with pytest.raises(NoEndpointError, match="filters"):
        scheduler.schedule(LLMRequest("r", "m"), pods("a"))


def test_a_factory_of_the_wrong_kind_is_refused(register: Callable[..., None]) -> None:
    register(register_scorer, "not-a-scorer", lambda name, params, ctx: NotA(name))
    with pytest.raises(TypeError, match="registered as a scorer"):
        build_plugin("not-a-scorer", "x", {}, validation_context())


def test_registering_a_name_twice_fails() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register_picker("max-score-picker", NoParams, lambda name, params, ctx: FirstPicker(name))
    assert PLUGIN_TYPES["max-score-picker"].kind == "picker"


def test_the_context_reaches_the_factory() -> None:
    context = PluginContext(index=validation_context().index, seed=7)
    one = build_plugin("max-score-picker", "p", {}, context)
    two = build_plugin("max-score-picker", "p", {}, context)
    ties = pods(*"abcdefgh")
    request = LLMRequest("r", "m")
    assert [one.pick(request, ties, [1.0] * 8)[0].name for _ in range(5)] == [  # type: ignore[union-attr]
        two.pick(request, ties, [1.0] * 8)[0].name
        for _ in range(5)  # type: ignore[union-attr]
    ]


def test_the_schema_alone_builds_no_plugin_and_the_core_builds_every_one() -> None:
    """`config/` is the schema (it cannot import the registry): `parse_spec` takes a bad
    parameter, the core's `parse_config` refuses it with the same error path."""
    bad = {"plugins": [{"type": "lora-affinity-scorer", "parameters": {"bogus": 1}}]}
    assert parse_spec(bad).plugins[0].parameters == {"bogus": 1}
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.parameters\.bogus: Extra inputs"):
        parse_config(bad)


def test_the_schemas_scorer_names_are_the_registrys_scorers() -> None:
    """`weights:` tells a scorer from the picker by `SCORER_TYPES` (the schema cannot ask
    the registry): each is a registered scorer, and each built-in profile is those
    scorers and one picker, last."""
    assert {kind_of(t) for t in SCORER_TYPES} == {"scorer"}
    for profile in default_scheduling()[1]:
        *scorers, picker = (ref.plugin_ref for ref in profile.plugins)
        assert set(scorers) <= SCORER_TYPES
        assert kind_of(picker) == "picker"
