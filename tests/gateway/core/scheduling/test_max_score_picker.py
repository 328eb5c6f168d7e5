"""`max-score-picker`'s `max_num_of_endpoints` is honoured, not only validated: it caps the
ranked pods a request gets (the proxy's retry fallbacks, the picker's destination list)."""

from __future__ import annotations

import pytest

from inference_gateway.config.spec import (
    GatewayConfigSpec,
    PluginRef,
    PluginSpec,
    SchedulingProfileSpec,
)
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.registry import build_plugin, validation_context
from inference_gateway.errors import ConfigError


def pods(n: int) -> list[Endpoint]:
    return [Endpoint(f"p{i}", "h", i, metrics=PodMetrics(waiting=i), stale=False) for i in range(n)]


def scheduler(parameters: dict[str, object]) -> Scheduler:
    plugins = [
        PluginSpec(type="queue-scorer"),
        PluginSpec(type="max-score-picker", parameters=parameters),
    ]
    profile = SchedulingProfileSpec(
        name="only",
        plugins=[
            PluginRef(plugin_ref="queue-scorer", weight=1),
            PluginRef(plugin_ref="max-score-picker"),
        ],
    )
    return Scheduler(
        GatewayConfigSpec(plugins=plugins, scheduling_profiles=[profile], default_profile="only"),
        priors={},
    )


@pytest.mark.parametrize(("limit", "expected"), [(1, ["p0"]), (2, ["p0", "p1"])])
def test_the_ranked_list_is_capped(limit: int, expected: list[str]) -> None:
    ranked = scheduler({"max_num_of_endpoints": limit}).schedule(LLMRequest("r", "m"), pods(4))
    assert [e.name for e in ranked] == expected  # best (shortest queue) first


def test_unset_returns_every_candidate_ranked() -> None:
    ranked = scheduler({}).schedule(LLMRequest("r", "m"), pods(4))
    assert [e.name for e in ranked] == ["p0", "p1", "p2", "p3"]


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises((ValueError, ConfigError)):
        build_plugin(
            "max-score-picker", "picker", {"max_num_of_endpoints": 0}, validation_context()
        )
