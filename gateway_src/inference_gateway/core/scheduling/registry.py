"""The one list of plugin types, each with its kind (filter, scorer, picker, and the
P/D decider and profile handler).

A type is registered with a typed factory, `(instance name, validated parameters,
PluginContext) -> plugin`, through the function of its kind, so a type checker holds
a scorer's factory to `Scorer` (and so on), and every reader asks the registry what a
plugin is instead of guessing from its name or its methods: config validation counts
pickers and demands scorer weights by kind (`config._check_profiles`), the scheduler
sorts a profile's plugins by kind, and a type that needs the shared prefix index says
so here. That is the upstream endpoint picker's model (GIE v1.x,
`pkg/epp/scheduling/framework/scheduler_profile.go`, `AddPlugins`: a plugin is added by
the interfaces it implements; a scorer without a weight is an error; a second picker
is an error). Registering a name twice is an error (upstream's `plugins.Register`
silently overwrites; a typo'd duplicate should fail loudly instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from inference_gateway.core.scheduling import pd
from inference_gateway.core.scheduling.plugins import (
    kv_cache,
    lora,
    max_score,
    no_hit_lru,
    precise_prefix,
    predicted_ttft,
    prefix,
    queue,
    running,
)
from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex
from inference_gateway.core.scheduling.types import Filter, Picker, PluginContext, Scorer

__all__ = [
    "OUTSIDE_PROFILES",
    "PLUGIN_TYPES",
    "Kind",
    "Plugin",
    "PluginType",
    "build_plugin",
    "kind_of",
    "register_decider",
    "register_filter",
    "register_handler",
    "register_picker",
    "register_scorer",
    "validation_context",
]

Kind = Literal["filter", "scorer", "picker", "decider", "profile-handler"]
Plugin = Filter | Scorer | Picker | pd.PrefixBasedPDDecider | pd.PDProfileHandler
P = TypeVar("P", bound=Params)

_METHOD: dict[Kind, str] = {
    "filter": "filter",
    "scorer": "score",
    "picker": "pick",
    "decider": "decide",
    "profile-handler": "prefill_profile_for",
}
#: kinds that stand outside any profile: the scheduler calls them between profile runs
OUTSIDE_PROFILES: frozenset[Kind] = frozenset({"decider", "profile-handler"})


@dataclass(frozen=True, slots=True)
class PluginType:
    """A registered type: its kind, its parameter model and its factory."""

    name: str
    kind: Kind
    params: type[Params]
    factory: Callable[[str, Any, PluginContext], Plugin]
    uses_prefix_index: bool = False  # the scheduler keeps its index up to date for it


PLUGIN_TYPES: dict[str, PluginType] = {}


def _register(plugin_type: PluginType) -> None:
    if plugin_type.name in PLUGIN_TYPES:
        raise ValueError(f"plugin type {plugin_type.name!r} registered twice")
    PLUGIN_TYPES[plugin_type.name] = plugin_type


def register_scorer(
    name: str,
    params: type[P],
    factory: Callable[[str, P, PluginContext], Scorer],
    *,
    uses_prefix_index: bool = False,
) -> None:
    _register(PluginType(name, "scorer", params, factory, uses_prefix_index))


def register_picker(
    name: str, params: type[P], factory: Callable[[str, P, PluginContext], Picker]
) -> None:
    _register(PluginType(name, "picker", params, factory))


def register_filter(
    name: str, params: type[P], factory: Callable[[str, P, PluginContext], Filter]
) -> None:
    _register(PluginType(name, "filter", params, factory))


def register_decider(
    name: str,
    params: type[P],
    factory: Callable[[str, P, PluginContext], pd.PrefixBasedPDDecider],
) -> None:
    _register(PluginType(name, "decider", params, factory))


def register_handler(
    name: str, params: type[P], factory: Callable[[str, P, PluginContext], pd.PDProfileHandler]
) -> None:
    _register(PluginType(name, "profile-handler", params, factory))


def kind_of(type_name: str) -> Kind | None:
    """The kind of a registered type; None for a type nobody registered."""
    plugin_type = PLUGIN_TYPES.get(type_name)
    return None if plugin_type is None else plugin_type.kind


def validation_context() -> PluginContext:
    """A context for building plugins only to check them (a fresh, empty prefix index)."""
    return PluginContext(index=PrefixIndex())


def build_plugin(
    type_name: str, instance_name: str, parameters: Mapping[str, Any], context: PluginContext
) -> Plugin:
    """A plugin instance. Raises KeyError for an unregistered type, pydantic's
    ValidationError (or a factory's ValueError) for bad parameters, and TypeError when
    a factory built something that is not of its registered kind."""
    plugin_type = PLUGIN_TYPES[type_name]
    plugin = plugin_type.factory(
        instance_name, plugin_type.params.model_validate(parameters), context
    )
    method = _METHOD[plugin_type.kind]
    if not callable(getattr(plugin, method, None)):
        raise TypeError(
            f"plugin type {type_name!r} is registered as a {plugin_type.kind}, but its "
            f"factory built a {type(plugin).__name__} without `{method}`"
        )
    return plugin


register_scorer(queue.TYPE, queue.QueueScorerParams, queue.build)
register_scorer(kv_cache.TYPE, kv_cache.KVParams, kv_cache.build)
register_scorer(running.TYPE, running.RunningParams, running.build)
register_scorer(lora.TYPE, lora.LoraParams, lora.build)
register_scorer(prefix.TYPE, prefix.PrefixParams, prefix.build, uses_prefix_index=True)
register_scorer(
    precise_prefix.TYPE,
    precise_prefix.PrecisePrefixParams,
    precise_prefix.build,
    uses_prefix_index=True,  # its fallback, and the affinity of where prompts were sent
)
register_scorer(
    predicted_ttft.TYPE,
    predicted_ttft.PredictedTTFTParams,
    predicted_ttft.build,
    uses_prefix_index=True,
)
register_scorer(
    no_hit_lru.TYPE,
    no_hit_lru.NoHitLRUParams,
    no_hit_lru.build,
    uses_prefix_index=True,  # cold = no leading block found in it
)
register_picker(max_score.TYPE, max_score.MaxScoreParams, max_score.build)
register_filter(pd.PREFILL_FILTER_TYPE, pd.RoleParams, pd.build_prefill_filter)
register_filter(pd.DECODE_FILTER_TYPE, pd.RoleParams, pd.build_decode_filter)
register_decider(pd.DECIDER_TYPE, pd.DeciderParams, pd.build_decider)
register_handler(pd.HANDLER_TYPE, pd.HandlerParams, pd.build_handler)
