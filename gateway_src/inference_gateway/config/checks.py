"""The checks of a gateway config that span its fields: every plugin builds, every
profile's references resolve by kind, every P/D handler names what exists, no name is
declared twice; and pydantic's errors as field paths (`format_validation_error`, which
every config reader of the package uses). `GatewayConfigSpec` runs them; they live here
so the spec module stays the shape of the config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from inference_gateway.core.scheduling.pd import DECIDER_TYPE, HandlerParams
from inference_gateway.core.scheduling.registry import (
    OUTSIDE_PROFILES,
    PLUGIN_TYPES,
    build_plugin,
    kind_of,
    validation_context,
)

if TYPE_CHECKING:
    from inference_gateway.config.spec import PluginSpec, SchedulingProfileSpec

__all__ = [
    "check_pd_handlers",
    "check_plugins",
    "check_profiles",
    "duplicates",
    "format_validation_error",
]


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


def duplicates(field: str, names: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for i, name in enumerate(names):
        if name in seen:
            out.append(f"{field}[{i}]: duplicate name {name!r}")
        seen.add(name)
    return out


def format_validation_error(error: ValidationError, prefix: str = "") -> list[str]:
    """Turn pydantic's error into `"a.b[2].c: message"` lines."""
    lines = []
    for item in error.errors():
        path = prefix
        for part in item["loc"]:
            if part == "[key]":  # a mapping's key failed: the key itself is the path
                continue
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path += f".{part}" if path else str(part)
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{path or '<root>'}: {message}")
    return lines
