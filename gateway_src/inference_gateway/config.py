"""The typed `InferenceGatewayConfig` spec: loading, validation, and its CRD schema.

One schema serves three readers: the gateway at run time (`igw serve --config`), the
cdk8s charts that render the `InferenceGatewayConfig` custom resource, and the CRD's
`openAPIV3Schema`, which is generated from these models by `openapi_v3_schema()`. A
config that would route nowhere (a model on an unknown pool, a profile that names an
unknown plugin, a scorer without a weight) is rejected here with its field path, so it
never reaches a cluster.

Field names are camelCase on the wire, as Kubernetes resources are; Python code uses the
snake_case attribute names. The picker part keeps the upstream endpoint-picker names
(`plugins[].type`, `schedulingProfiles[].plugins[].pluginRef`, `weight`) so a user can
carry an upstream picker config over.

Errors: `ConfigError` (a subclass of `InferenceGatewayError`) carries every problem as
`"field.path: message"` lines.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .errors import ConfigError

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "BandSpec",
    "ConfigError",
    "FlowControlSpec",
    "GatewayConfigSpec",
    "ModelSpec",
    "ObjectiveSpec",
    "PluginRef",
    "PluginSpec",
    "PoolSpec",
    "RateLimitSpec",
    "SaturationSpec",
    "SchedulingProfileSpec",
    "ScrapeSpec",
    "default_scheduling",
    "format_validation_error",
    "load_config",
    "openapi_v3_schema",
    "parse_config",
    "read_yaml",
]

API_GROUP = "inference.igw.dev"
API_VERSION = "v1alpha1"

Engine = Literal["vllm", "sglang", "trtllm", "tgi"]
BandName = Literal["critical", "standard", "sheddable"]


class Spec(BaseModel):
    """Base of every config model: camelCase on the wire, unknown keys are errors."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class PluginSpec(Spec):
    """One plugin instance, upstream shape: `{type, name?, parameters?}`."""

    type: str = Field(description="Registered plugin type, e.g. queue-scorer.")
    name: str | None = Field(default=None, description="Instance name; defaults to type.")
    parameters: dict[str, Any] = Field(default_factory=dict)

    @property
    def instance_name(self) -> str:
        return self.name or self.type


class PluginRef(Spec):
    plugin_ref: str = Field(description="Name of a plugin instance declared in plugins.")
    weight: float | None = Field(default=None, ge=0, description="Scorer weight.")


class SchedulingProfileSpec(Spec):
    name: str
    plugins: list[PluginRef] = Field(min_length=1)


class ScrapeSpec(Spec):
    """How often pods' metrics are read and when a pod counts as stale."""

    interval_ms: int = Field(default=50, ge=5, le=60_000)
    timeout_ms: int = Field(default=1000, ge=5, le=60_000)
    staleness_ms: int = Field(default=2000, ge=10, le=600_000)

    @model_validator(mode="after")
    def _staleness_covers_interval(self) -> ScrapeSpec:
        if self.staleness_ms < self.interval_ms:
            raise ValueError("stalenessMs must be at least intervalMs")
        return self


class PoolSpec(Spec):
    """A set of identical model-server pods (an InferencePool)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    selector: dict[str, str] = Field(
        default_factory=dict, description="Pod label selector (matchLabels)."
    )
    target_port: int = Field(default=8000, ge=1, le=65535)
    engine: Engine = "vllm"
    gpu: str | None = Field(default=None, description="GPU profile name, e.g. H100.")
    hourly_usd: float | None = Field(default=None, ge=0, description="Price of one pod.")
    failure_mode: Literal["FailOpen", "FailClose"] = "FailClose"


class ModelSpec(Spec):
    """A client-facing model name and the pool that serves it."""

    name: str = Field(min_length=1)
    pool: str
    profile: str | None = Field(default=None, description="Scheduling profile name.")
    adapters: list[str] = Field(
        default_factory=list, description="LoRA adapters served by the pool for this model."
    )
    default_band: BandName = "standard"


class ObjectiveSpec(Spec):
    """An InferenceObjective: a name the client sends, mapped to a priority."""

    name: str
    priority: int = Field(description="Higher is more important; negative is sheddable.")
    pool: str | None = None


class BandSpec(Spec):
    max_queue: int = Field(default=256, ge=0)
    ttl_s: float = Field(default=30.0, gt=0)


class SaturationSpec(Spec):
    """Saturation detector: when a pod counts as full, per band.

    A pod is full at `waiting + sent >= queue_threshold`, at `kv >= kv_threshold`, or at
    `pending prefill >= prefill_threshold_s` (upstream's `max(queue/5, kv/0.8) >= 1`
    plus a prefill term). Pending prefill is the prompt tokens this gateway sent to the
    pod that have not produced a first token yet (waiting or being prefilled, which
    vLLM reports as *running*), times the pod's prefill speed measured online from
    TTFTs: the delay a new request would queue behind.

    The plain thresholds bound what critical requests may use; standard and sheddable
    requests are held to the stricter `noncritical_*` ones, which leaves headroom only
    critical requests take, for `critical_reserve_s` after the last critical request
    (headroom nobody uses only slows the other bands down). The prefill term matters
    for long prompts: vLLM admits several into its chunked-prefill batch at once, so a
    pod's waiting queue is empty while a new request would wait for all of them
    (measurements in docs/traffic-control.md). `None` turns the prefill term off; with
    it off for both and the non-critical thresholds equal to the plain ones, the
    detector is upstream's.
    """

    queue_threshold: float = Field(
        default=5.0, gt=0, description="Waiting plus sent requests that fill a pod (upstream 5)."
    )
    kv_threshold: float = Field(
        default=0.8, gt=0, le=1, description="KV-cache use that fills a pod (upstream 0.8)."
    )
    prefill_threshold_s: float | None = Field(
        default=1.0,
        gt=0,
        description="Seconds of pending prefill that fill a pod; null turns the term off.",
    )
    noncritical_queue_threshold: float = Field(
        default=1.0, gt=0, description="queueThreshold for standard and sheddable requests."
    )
    noncritical_kv_threshold: float = Field(
        default=0.6, gt=0, le=1, description="kvThreshold for standard and sheddable requests."
    )
    noncritical_prefill_threshold_s: float | None = Field(
        default=0.05,
        gt=0,
        description="prefillThresholdS for standard and sheddable requests; null: off.",
    )

    critical_reserve_s: float | None = Field(
        default=30.0,
        gt=0,
        description=(
            "The noncritical thresholds apply for this long after the last critical "
            "request; without recent critical traffic every band fills pods to the plain "
            "thresholds. null: always apply them."
        ),
    )

    @model_validator(mode="after")
    def _stricter_for_noncritical(self) -> SaturationSpec:
        critical, noncritical = self.prefill_threshold_s, self.noncritical_prefill_threshold_s
        if (
            self.noncritical_queue_threshold > self.queue_threshold
            or self.noncritical_kv_threshold > self.kv_threshold
            or (critical is not None and (noncritical is None or noncritical > critical))
        ):
            raise ValueError("noncritical thresholds must not exceed the critical ones")
        return self


class FlowControlSpec(Spec):
    saturation: SaturationSpec = SaturationSpec()
    bands: dict[BandName, BandSpec] = Field(
        default_factory=lambda: {
            "critical": BandSpec(max_queue=4096, ttl_s=60),
            "standard": BandSpec(max_queue=4096),
            "sheddable": BandSpec(max_queue=0, ttl_s=5),
        }
    )
    retry_after_min_s: int = Field(default=1, ge=1)
    retry_after_max_s: int = Field(default=60, ge=1)


class RateLimitSpec(Spec):
    """A token-bucket limit per API key and/or model."""

    client: str | None = Field(
        default=None,
        description="Authenticated client id (API key file or JWT subject); none: each client.",
    )
    api_key: str | None = Field(
        default=None,
        description="Bearer key, for a gateway without authentication; prefer client.",
    )
    model: str | None = None
    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _some_limit(self) -> RateLimitSpec:
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("set requestsPerMinute or tokensPerMinute")
        return self


def default_scheduling() -> tuple[list[PluginSpec], list[SchedulingProfileSpec]]:
    """The shipped plugins and the `latency` (chat) and `throughput` (batch) profiles.

    `latency` leads with predicted TTFT, which knows each pod's speed, and keeps the
    upstream scorers beside it; `throughput` packs by queue and KV headroom and cares
    less about the first token.
    """
    plugins = [
        PluginSpec(type="queue-scorer"),
        PluginSpec(type="kv-cache-utilization-scorer"),
        PluginSpec(type="prefix-cache-scorer"),
        PluginSpec(type="lora-affinity-scorer"),
        PluginSpec(type="running-requests-size-scorer"),
        PluginSpec(type="predicted-ttft-scorer"),
        PluginSpec(type="max-score-picker"),
    ]
    ref = PluginRef
    profiles = [
        SchedulingProfileSpec(
            name="latency",
            plugins=[
                ref(plugin_ref="predicted-ttft-scorer", weight=6),
                ref(plugin_ref="prefix-cache-scorer", weight=1),
                # as strong as the TTFT prediction: an adapter request sent where its
                # adapter is not loaded waits for a slot, which the prediction cannot see
                # (lora-mix P99 TTFT 0.14 s at weight 6, 85 s at weight 1)
                ref(plugin_ref="lora-affinity-scorer", weight=6),
                ref(plugin_ref="kv-cache-utilization-scorer", weight=1),
                ref(plugin_ref="max-score-picker"),
            ],
        ),
        SchedulingProfileSpec(
            name="throughput",
            plugins=[
                ref(plugin_ref="queue-scorer", weight=2),
                ref(plugin_ref="kv-cache-utilization-scorer", weight=2),
                ref(plugin_ref="prefix-cache-scorer", weight=3),
                ref(plugin_ref="lora-affinity-scorer", weight=1),
                ref(plugin_ref="max-score-picker"),
            ],
        ),
    ]
    return plugins, profiles


def _default_plugins() -> list[PluginSpec]:
    return default_scheduling()[0]


def _default_profiles() -> list[SchedulingProfileSpec]:
    return default_scheduling()[1]


class GatewayConfigSpec(Spec):
    """`InferenceGatewayConfig.spec`: models, pools, scheduling, flow control, limits."""

    pools: list[PoolSpec] = Field(default_factory=list)
    models: list[ModelSpec] = Field(default_factory=list)
    plugins: list[PluginSpec] = Field(
        default_factory=_default_plugins,
        description="Plugin instances; the built-in ones stay unless one of the same "
        "instance name replaces it.",
    )
    scheduling_profiles: list[SchedulingProfileSpec] = Field(
        default_factory=_default_profiles,
        description="Profiles; the built-in latency and throughput profiles stay unless "
        "one of the same name replaces it.",
    )
    default_profile: str = "latency"
    objectives: list[ObjectiveSpec] = Field(default_factory=list)
    scrape: ScrapeSpec = ScrapeSpec()
    flow_control: FlowControlSpec = FlowControlSpec()
    rate_limits: list[RateLimitSpec] = Field(default_factory=list)

    @field_validator("plugins", mode="after")
    @classmethod
    def _extend_builtin_plugins(cls, given: list[PluginSpec]) -> list[PluginSpec]:
        own = {p.instance_name for p in given}
        return given + [p for p in _default_plugins() if p.instance_name not in own]

    @field_validator("scheduling_profiles", mode="after")
    @classmethod
    def _extend_builtin_profiles(
        cls, given: list[SchedulingProfileSpec]
    ) -> list[SchedulingProfileSpec]:
        """A config's profiles come on top of the built-ins: a config that adds or retunes
        one profile must not lose the others its models name (`throughput`). The given
        ones keep their positions, so error paths index what the user wrote."""
        own = {p.name for p in given}
        return given + [p for p in _default_profiles() if p.name not in own]

    @model_validator(mode="after")
    def _references_resolve(self) -> GatewayConfigSpec:
        problems: list[str] = []
        problems += _duplicates("pools", [p.name for p in self.pools])
        problems += _duplicates("models", [m.name for m in self.models])
        problems += _duplicates("plugins", [p.instance_name for p in self.plugins])
        problems += _duplicates("schedulingProfiles", [p.name for p in self.scheduling_profiles])
        pools = {p.name for p in self.pools}
        plugins = {p.instance_name: p for p in self.plugins}
        profiles = {p.name for p in self.scheduling_profiles}
        served: dict[str, str] = {}
        for i, model in enumerate(self.models):
            if model.pool not in pools:
                problems.append(f"models[{i}].pool: unknown pool {model.pool!r}")
            if model.profile is not None and model.profile not in profiles:
                problems.append(f"models[{i}].profile: unknown profile {model.profile!r}")
            for j, adapter in enumerate(model.adapters):
                if adapter in served and served[adapter] != model.name:
                    problems.append(
                        f"models[{i}].adapters[{j}]: {adapter!r} already served by "
                        f"model {served[adapter]!r}"
                    )
                served[adapter] = model.name
        if self.default_profile not in profiles:
            problems.append(f"defaultProfile: unknown profile {self.default_profile!r}")
        for i, profile in enumerate(self.scheduling_profiles):
            pickers = 0
            for j, ref in enumerate(profile.plugins):
                where = f"schedulingProfiles[{i}].plugins[{j}]"
                plugin = plugins.get(ref.plugin_ref)
                if plugin is None:
                    problems.append(f"{where}.pluginRef: unknown plugin {ref.plugin_ref!r}")
                    continue
                if plugin.type.endswith("-picker"):
                    pickers += 1
                elif plugin.type.endswith("-scorer") and not ref.weight:
                    problems.append(f"{where}.weight: a scorer needs a weight above 0")
            if pickers > 1:
                problems.append(f"schedulingProfiles[{i}].plugins: more than one picker")
        for i, objective in enumerate(self.objectives):
            if objective.pool is not None and objective.pool not in pools:
                problems.append(f"objectives[{i}].pool: unknown pool {objective.pool!r}")
        if self.flow_control.retry_after_min_s > self.flow_control.retry_after_max_s:
            problems.append("flowControl.retryAfterMinS: above retryAfterMaxS")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def pool(self, name: str) -> PoolSpec:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def profile(self, name: str) -> SchedulingProfileSpec:
        for profile in self.scheduling_profiles:
            if profile.name == name:
                return profile
        raise KeyError(name)


def _duplicates(field: str, names: list[str]) -> list[str]:
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
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path += f".{part}" if path else str(part)
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{path or '<root>'}: {message}")
    return lines


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> GatewayConfigSpec:
    """Validate a mapping: either a bare spec or a whole `InferenceGatewayConfig` resource."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, ["<root>: expected a mapping"])
    prefix = ""
    if data.get("kind") == "InferenceGatewayConfig":
        data, prefix = data.get("spec") or {}, "spec"
    try:
        return GatewayConfigSpec.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error, prefix)) from None


def read_yaml(path: str | Path) -> Any:
    """One YAML document from a file; an unreadable file or bad YAML is a ConfigError."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise ConfigError(str(path), [f"<root>: cannot read file: {error.strerror}"]) from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), [f"<root>: invalid YAML: {error}"]) from None


def load_config(path: str | Path) -> GatewayConfigSpec:
    """Read and validate a YAML config file."""
    return parse_config(read_yaml(path) or {}, str(path))


def openapi_v3_schema() -> dict[str, Any]:
    """The CRD `openAPIV3Schema` of `InferenceGatewayConfig.spec`, generated from the models.

    Kubernetes structural schemas allow no `$ref`, `title`, or `anyOf` with `null`, so refs
    are inlined and optional fields become `nullable`.
    """
    raw = GatewayConfigSpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return convert(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]))
        node = {k: v for k, v in node.items() if k not in ("title", "default")}
        options = node.get("anyOf")
        if options is not None:
            non_null = [o for o in options if o.get("type") != "null"]
            if len(non_null) == 1 and len(non_null) < len(options):
                merged = {k: v for k, v in node.items() if k != "anyOf"}
                merged.update(convert(non_null[0]))
                merged["nullable"] = True
                return merged
        if "const" in node:
            node["enum"] = [node.pop("const")]
        # A mapping with Literal keys: structural schemas have no `propertyNames`, so
        # each allowed key becomes a named property with the value schema.
        names = node.pop("propertyNames", None)
        if names is not None and isinstance(node.get("additionalProperties"), dict):
            value = node.pop("additionalProperties")
            node["properties"] = {key: value for key in names.get("enum", [])}
        # OpenAPI v3.0 bounds: a boolean beside minimum/maximum, not a number.
        for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if isinstance(node.get(exclusive), int | float) and not isinstance(
                node.get(exclusive), bool
            ):
                node[bound] = node[exclusive]
                node[exclusive] = True
        # A free-form mapping (`dict[str, Any]`) must keep its fields through pruning.
        if node.get("additionalProperties") is True:
            node.pop("additionalProperties")
            node["x-kubernetes-preserve-unknown-fields"] = True
        if node.get("additionalProperties") is False:
            node.pop("additionalProperties")
        return {k: convert(v) for k, v in node.items()}

    spec = convert(raw)
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }
