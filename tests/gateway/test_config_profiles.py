"""A config's `schedulingProfiles` and `plugins` extend the built-in ones.

A config that retunes one profile must keep the others its models name: the docs'
what-if example adds only `latency`, and prod's batch model uses `throughput`.
"""

from __future__ import annotations

import pytest

from inference_gateway.config.spec import default_scheduling
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.errors import ConfigError

POOLS = {"pools": [{"name": "p", "selector": {"app": "vllm"}}]}


def test_a_profile_of_a_new_name_comes_on_top_of_the_builtins() -> None:
    spec = parse_config(
        {
            **POOLS,
            "schedulingProfiles": [
                {"name": "fast", "plugins": [{"pluginRef": "queue-scorer", "weight": 1}]}
            ],
        },
        "test",
    )
    assert [p.name for p in spec.scheduling_profiles] == ["fast", "latency", "throughput"]


def test_a_profile_of_a_builtin_name_replaces_it_and_models_keep_the_other() -> None:
    latency = {"name": "latency", "plugins": [{"pluginRef": "lora-affinity-scorer", "weight": 1}]}
    spec = parse_config(
        {
            **POOLS,
            "models": [{"name": "batch", "pool": "p", "profile": "throughput"}],
            "schedulingProfiles": [latency],
        },
        "test",
    )
    assert [p.name for p in spec.scheduling_profiles] == ["latency", "throughput"]
    assert [r.plugin_ref for r in spec.profile("latency").plugins] == ["lora-affinity-scorer"]
    assert spec.profile("throughput") == default_scheduling()[1][1]


def test_a_plugin_of_a_builtin_name_replaces_it() -> None:
    spec = parse_config(
        {**POOLS, "plugins": [{"type": "prefix-cache-scorer", "parameters": {"blockSize": 32}}]},
        "test",
    )
    names = [p.instance_name for p in spec.plugins]
    assert names.count("prefix-cache-scorer") == 1 and "queue-scorer" in names
    assert spec.plugins[0].parameters == {"blockSize": 32}


def test_a_duplicate_given_profile_is_still_refused() -> None:
    twice = {"name": "x", "plugins": [{"pluginRef": "queue-scorer", "weight": 1}]}
    with pytest.raises(ConfigError, match="schedulingProfiles\\[1\\]: duplicate name 'x'"):
        parse_config({**POOLS, "schedulingProfiles": [twice, twice]}, "test")
