"""The one list of plugin types. Registering a name twice is an error (upstream silently
overwrites; a typo'd duplicate should fail loudly instead)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from inference_gateway.config.spec import PluginSpec, format_validation_error
from inference_gateway.core.scheduling.plugins import (
    kv_cache,
    lora,
    max_score,
    predicted_ttft,
    prefix,
    queue,
    running,
)
from inference_gateway.errors import ConfigError

__all__ = ["PLUGIN_TYPES", "build_plugin", "register"]

Factory = Callable[..., Any]
PLUGIN_TYPES: dict[str, Factory] = {}


def register(type_name: str, factory: Factory) -> None:
    if type_name in PLUGIN_TYPES:
        raise ValueError(f"plugin type {type_name!r} registered twice")
    PLUGIN_TYPES[type_name] = factory


for _module in (queue, kv_cache, running, lora, prefix, predicted_ttft, max_score):
    register(_module.TYPE, _module.build)


def build_plugin(spec: PluginSpec, where: str = "plugins", **context: Any) -> Any:
    """Instantiate a plugin from its spec; unknown types and bad parameters → ConfigError."""
    factory = PLUGIN_TYPES.get(spec.type)
    if factory is None:
        raise ConfigError(
            "config",
            [f"{where}.type: unknown plugin type {spec.type!r} (known: {sorted(PLUGIN_TYPES)})"],
        )
    try:
        return factory(spec.instance_name, spec.parameters, **context)
    except ValidationError as error:
        raise ConfigError("config", format_validation_error(error, f"{where}.parameters")) from None
