"""A gateway config read whole: its shape (`config/spec.py`) and what needs the plugins.

The schema cannot build plugins (the registry is the core's, and the core imports the
schema), so the checks that do live here and go into the schema's validation through
`PLUGIN_CHECKS`: every plugin builds, every profile's references resolve by kind, every
P/D handler names what exists. `parse_config` and `load_config` are how everything that
runs or ships a config reads one; their errors are the schema's, in the same list.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inference_gateway.config.checks import format_validation_error
from inference_gateway.config.spec import (
    GatewayConfigSpec,
    PluginSpec,
    SchedulingProfileSpec,
    load_spec,
    parse_spec,
)
from inference_gateway.core.scheduling.pd import DECIDER_TYPE, HandlerParams
from inference_gateway.core.scheduling.registry import (
    OUTSIDE_PROFILES,
    PLUGIN_TYPES,
    build_plugin,
    kind_of,
    validation_context,
)

__all__ = [
    "check_pd_handlers",
    "check_plugins",
    "check_profiles",
    "load_config",
    "parse_config",
    "plugin_problems",
]


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> GatewayConfigSpec:
    """`parse_spec` with every plugin built: a config that passes runs."""
    return parse_spec(data, source, plugin_problems)


def load_config(path: str | Path) -> GatewayConfigSpec:
    """`load_spec` with every plugin built."""
    return load_spec(path, plugin_problems)


def plugin_problems(spec: GatewayConfigSpec) -> list[str]:
    plugins = {p.instance_name: p for p in spec.plugins}
    profiles = {p.name for p in spec.scheduling_profiles}
    return (
        check_plugins(spec.plugins)
        + check_profiles(spec.scheduling_profiles, plugins)
        + check_pd_handlers(spec.plugins, profiles)
    )


def check_plugins(specs: list[PluginSpec]) -> list[str]:
    """Build every plugin once, so an unknown type or a bad parameter fails here."""
    problems: list[str] = []
    context = validation_context()
    for i, spec in enumerate(specs):
        if spec.type not in PLUGIN_TYPES:
            problems.append(
                f"plugins[{i}].type: unknown plugin type {spec.type!r} "
                f"(known: {', '.join(sorted(PLUGIN_TYPES))})"
            )
            continue
        try:
            build_plugin(spec.type, spec.instance_name, spec.parameters, context)
        except ValidationError as error:
            problems += format_validation_error(error, f"plugins[{i}].parameters")
        except ValueError as error:
            problems.append(f"plugins[{i}].parameters: {error}")
    return problems


def check_profiles(
    profiles: list[SchedulingProfileSpec], plugins: Mapping[str, PluginSpec]
) -> list[str]:
    """Each ref resolves; by kind, a scorer carries a weight and a profile has at most
    one picker (upstream `SchedulerProfile.AddPlugins`)."""
    problems: list[str] = []
    for i, profile in enumerate(profiles):
        picker: str | None = None
        for j, ref in enumerate(profile.plugins):
            where = f"schedulingProfiles[{i}].plugins[{j}]"
            plugin = plugins.get(ref.plugin_ref)
            if plugin is None:
                problems.append(f"{where}.pluginRef: unknown plugin {ref.plugin_ref!r}")
                continue
            kind = kind_of(plugin.type)
            if kind in OUTSIDE_PROFILES:
                problems.append(
                    f"{where}.pluginRef: {ref.plugin_ref!r} is a {kind}, which the scheduler "
                    "runs between profiles, not inside one"
                )
            elif kind == "picker":
                if picker is not None:
                    problems.append(
                        f"{where}.pluginRef: {ref.plugin_ref!r} is a second picker "
                        f"(the profile already has {picker!r})"
                    )
                picker = picker or ref.plugin_ref
            elif kind == "scorer" and not ref.weight:
                problems.append(f"{where}.weight: a scorer needs a weight above 0")
    return problems


def check_pd_handlers(specs: list[PluginSpec], profiles: set[str]) -> list[str]:
    """Each `pd-profile-handler` names two distinct existing profiles and a decider
    plugin, and no two handlers claim one decode profile (a request would have two
    answers to "is a prefill leg worth it")."""
    problems: list[str] = []
    kinds = {spec.instance_name: kind_of(spec.type) for spec in specs}
    claimed: dict[str, str] = {}
    for i, spec in enumerate(specs):
        if kinds[spec.instance_name] != "profile-handler":
            continue
        where = f"plugins[{i}].parameters"
        try:
            params = HandlerParams.model_validate(spec.parameters)
        except ValidationError:
            continue  # `_check_plugins` reported it
        decode, prefill = params.decode_profile, params.prefill_profile
        decider = params.decider_plugin_name
        named = [("decodeProfile", decode), ("prefillProfile", prefill)]
        if params.aggregated_profile is not None:
            named.append(("aggregatedProfile", params.aggregated_profile))
        for key, name in named:
            if name not in profiles:
                problems.append(f"{where}.{key}: unknown profile {name!r}")
        if decode == prefill:
            problems.append(f"{where}.prefillProfile: the same profile as decodeProfile")
        if kinds.get(decider) != "decider":
            problems.append(
                f"{where}.deciderPluginName: {decider!r} is not a declared decider plugin "
                f"(declare one, e.g. {{type: {DECIDER_TYPE}}})"
            )
        if decode in claimed:
            problems.append(
                f"{where}.decodeProfile: {decode!r} already has the handler {claimed[decode]!r}"
            )
        claimed.setdefault(decode, spec.instance_name)
    return problems
