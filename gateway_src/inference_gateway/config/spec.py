"""The typed `InferenceGatewayConfig` spec: loading, validation, and its CRD schema.

One schema serves three readers: the gateway at run time (`igw serve --config`), the
cdk8s charts that render the `InferenceGatewayConfig` custom resource, and the CRD's
`openAPIV3Schema`, which is generated from these models by `openapi_v3_schema()`. A
config that would route nowhere (a model on an unknown pool, a profile that names an
unknown plugin) is rejected here with its field path, so it never reaches a cluster.
This module is the schema and imports nothing of the core: what needs the plugins (an
unknown type, a bad parameter, a scorer without a weight, two pickers in a profile) is
checked by the core (`core/scheduling/config_checks.py`: every plugin built once,
through its registry), inside the same validation and with the same error paths
(`plugins[2].parameters.blockSize: ...`), when a config is read with the core's
`parse_config` / `load_config`; `parse_spec` / `load_spec` here check the shape alone.

Field names are camelCase on the wire, as Kubernetes resources are; Python code uses the
snake_case attribute names. The picker part keeps the upstream endpoint-picker names
(`plugins[].type`, `schedulingProfiles[].plugins[].pluginRef`, `weight`) so a user can
carry an upstream picker config over.

Errors: `ConfigError` (a subclass of `InferenceGatewayError`) carries every problem as
`"field.path: message"` lines.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from inference_gateway.config.checks import duplicates, format_validation_error
from inference_gateway.errors import ConfigError

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "MAX_CONFIG_BYTES",
    "PLUGIN_CHECKS",
    "SAFE_LOADER",
    "SCORER_NAMES",
    "SCORER_TYPES",
    "BandSpec",
    "ConfigError",
    "ExplainSpec",
    "FlowControlSpec",
    "GatewayConfigSpec",
    "LabelSelector",
    "LabelSelectorRequirement",
    "MigrationSpec",
    "ModelSpec",
    "ObjectiveSpec",
    "PluginRef",
    "PluginSpec",
    "PoolSpec",
    "RateLimitSpec",
    "SaturationSpec",
    "SchedulingProfileSpec",
    "ScrapeSpec",
    "TracingSpec",
    "default_scheduling",
    "format_validation_error",
    "load_spec",
    "openapi_v3_schema",
    "parse_spec",
    "read_capped",
    "read_yaml",
    "weigh_profile",
]

#: Where `parse_spec` puts the checks that build plugins in pydantic's validation context:
#: the plugin registry is the core's, which imports this module, so the schema cannot
#: call it; the core hands its checks in (`core.scheduling.config_checks`).
PLUGIN_CHECKS = "igw.plugin_checks"
PluginChecks = Callable[["GatewayConfigSpec"], list[str]]

#: LibYAML's parser when PyYAML was built with it (the wheels are): the same safe subset
#: as `yaml.SafeLoader`, about eight times faster on a large file.
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The largest config or rewrites file read: what one ConfigMap can hold (Kubernetes
#: caps a ConfigMap's data at 1 MiB), so no real mount is refused, and a runaway file
#: can neither hold a reload for seconds nor the memory of its parse.
MAX_CONFIG_BYTES = 2**20

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
    cpu_budget_cores: float = Field(
        default=0.25,
        gt=0,
        le=64,
        description="CPU scraping may use, in cores, before the interval stretches to fit "
        "(docs/sizing.md: about 1 core keeps 1,024 pods' views within 100 ms).",
    )

    @model_validator(mode="after")
    def _staleness_covers_interval(self) -> ScrapeSpec:
        if self.staleness_ms < self.interval_ms:
            raise ValueError("stalenessMs must be at least intervalMs")
        return self


# Kubernetes label syntax (apimachinery `IsQualifiedName`, `IsValidLabelValue`): a name
# of at most 63 alphanumerics, `-`, `_`, `.`, alphanumeric at both ends; a key may carry a
# DNS-subdomain prefix and `/`. The API server refuses anything else in a selector.
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and not (
        prefix and len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix) and "/" not in prefix
    ):
        raise ValueError(f"{key!r}: the prefix before '/' must be a DNS subdomain")
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise ValueError(
            f"{key!r}: a label name is 1-63 alphanumerics, '-', '_' or '.', "
            "alphanumeric at both ends"
        )
    return key


def _label_value(value: str) -> str:
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        raise ValueError(
            f"{value!r}: a label value is empty or 1-63 alphanumerics, '-', '_' or '.', "
            "alphanumeric at both ends"
        )
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]


class LabelSelectorRequirement(Spec):
    """One `matchExpressions` entry, with the API server's rules: `In`/`NotIn` need
    values, `Exists`/`DoesNotExist` take none."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list, validate_default=True)

    @field_validator("values", mode="after")
    @classmethod
    def _values_fit_operator(cls, values: list[str], info: ValidationInfo) -> list[str]:
        operator = info.data.get("operator")
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"must be non-empty when operator is {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"must be empty when operator is {operator}")
        return values

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: `NotIn` also matches a pod without the key."""
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        return (self.key in labels) == (self.operator == "Exists")


class LabelSelector(Spec):
    """A Kubernetes `LabelSelector`; the plain map `{key: value}` is its `matchLabels`.

    Both spellings are accepted: a migrating team writes `matchLabels`/`matchExpressions`,
    existing configs write the plain map. A mapping with a `matchLabels` or
    `matchExpressions` key is the full form (so neither can be a label key of the plain
    form). All requirements are ANDed; an empty selector selects every pod.

    In the CRD, one schema cannot be both a free map and an object with two known
    properties (`properties` and `additionalProperties` exclude each other, and an `anyOf`
    of the two is not structural), so the field keeps unknown keys
    (`x-kubernetes-preserve-unknown-fields`) beside the typed full form, and the runtime
    validation here checks the plain map.
    """

    model_config = ConfigDict(
        **Spec.model_config, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _plain_map_is_match_labels(cls, value: Any) -> Any:
        full = {"matchLabels", "matchExpressions", "match_labels", "match_expressions"}
        if isinstance(value, Mapping) and not full & value.keys():
            return {"matchLabels": value}
        return value

    @model_serializer(mode="wrap")
    def _plain_when_it_can(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Without expressions a selector dumps as the plain map, so a rendered config
        stays readable by a picker of the previous release during a rollout."""
        out = handler(self)
        if self.match_expressions:
            return out
        return out.get("matchLabels", out.get("match_labels"))

    @classmethod
    def of(cls, value: LabelSelector | Mapping[str, Any]) -> LabelSelector:
        """A selector from either spelling (a plain map is matchLabels)."""
        return value if isinstance(value, LabelSelector) else cls.model_validate(value)

    @property
    def selects_everything(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


class PoolSpec(Spec):
    """A set of identical model-server pods (an InferencePool)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    selector: LabelSelector = Field(
        default_factory=LabelSelector,
        description="Pod label selector: a plain map (matchLabels) or a Kubernetes "
        "LabelSelector with matchLabels and matchExpressions.",
    )
    target_port: int = Field(default=8000, ge=1, le=65535)
    engine: Engine = "vllm"
    gpu: str | None = Field(default=None, description="GPU profile name, e.g. H100.")
    hourly_usd: float | None = Field(default=None, ge=0, description="Price of one pod.")
    failure_mode: Literal["FailOpen", "FailClose"] = "FailClose"
    route_timeout_s: int | None = Field(
        default=None,
        ge=1,
        description="In the cluster: the longest a request to this pool may take, first "
        "byte to last (its HTTPRoute's timeouts.request); default the chart's route "
        "timeout. The managed add-on's per-scheduler routeTimeout.",
    )


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
    plus a prefill term; KV full at 0.9, see docs/traffic-control.md). Pending prefill
    is the prompt tokens this gateway sent to the pod that have not produced a first
    token yet (waiting or being prefilled, which vLLM reports as *running*), times the
    pod's prefill speed measured online from TTFTs: the delay a new request would queue
    behind.

    The plain thresholds bound what critical requests may use; standard and sheddable
    requests are held to the stricter `noncritical_*` ones, which leaves headroom only
    critical requests take, for `critical_reserve_s` after the last critical request
    (headroom nobody uses only slows the other bands down). The prefill term matters
    for long prompts: vLLM admits several into its chunked-prefill batch at once, so a
    pod's waiting queue is empty while a new request would wait for all of them
    (measurements in docs/traffic-control.md). `None` turns the prefill term off; with
    it off for both, `kv_threshold` 0.8 and the non-critical thresholds equal to the
    plain ones, the detector is upstream's.
    """

    queue_threshold: float = Field(
        default=5.0, gt=0, description="Waiting plus sent requests that fill a pod (upstream 5)."
    )
    # 0.9, not upstream's 0.8: a pod at 0.8 still admits requests, and when a burst fills
    # every pod's cache evenly (the TTFT predictor balances pending prefill, not KV) the
    # gate held requests the pods would have served at once: in `qwen3-235b-h100` one
    # burst held 205 requests for up to 0.8 s, P99 TTFT 0.274 s against 0.151 s at 0.9
    # (round-robin 0.192); the other headline scenarios, at their shipped durations, are
    # unchanged or better but `qwen3-32b-mixed`'s P99, +0.5 % (docs/traffic-control.md).
    kv_threshold: float = Field(
        default=0.9, gt=0, le=1, description="KV-cache use that fills a pod (upstream 0.8)."
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


def _default_bands() -> dict[BandName, BandSpec]:
    return {
        "critical": BandSpec(max_queue=4096, ttl_s=60),
        "standard": BandSpec(max_queue=4096),
        "sheddable": BandSpec(max_queue=0, ttl_s=5),
    }


class FlowControlSpec(Spec):
    saturation: SaturationSpec = SaturationSpec()
    bands: dict[BandName, BandSpec] = Field(default_factory=_default_bands)
    retry_after_min_s: int = Field(default=1, ge=1)
    retry_after_max_s: int = Field(default=60, ge=1)


class RateLimitSpec(Spec):
    """A sliding-window limit per client and/or model."""

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
    window_s: float | None = Field(
        default=None,
        ge=1,
        le=3600,
        description="Seconds the per-minute numbers count over (default a minute; igw global: "
        "rateLimits.windowS).",
    )

    @model_validator(mode="after")
    def _some_limit(self) -> RateLimitSpec:
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("set requestsPerMinute or tokensPerMinute")
        return self


def default_scheduling() -> tuple[list[PluginSpec], list[SchedulingProfileSpec]]:
    """The shipped plugins and the `latency` (chat) and `throughput` (batch) profiles.

    `latency` leads with predicted TTFT, which knows each pod's speed, and keeps the
    upstream scorers beside it; its prefix affinity is the precise scorer, which reads
    the pods' KV events where they publish them and is the approximate (sent-based)
    scorer where they do not; `throughput` packs by queue and KV headroom and cares
    less about the first token.
    """
    plugins = [
        PluginSpec(type="queue-scorer"),
        PluginSpec(type="kv-cache-utilization-scorer"),
        PluginSpec(type="prefix-cache-scorer"),
        PluginSpec(type="precise-prefix-cache-scorer"),
        PluginSpec(type="lora-affinity-scorer"),
        PluginSpec(type="running-requests-size-scorer"),
        PluginSpec(type="predicted-ttft-scorer"),
        PluginSpec(type="no-hit-lru-scorer"),
        PluginSpec(type="max-score-picker"),
    ]
    ref = PluginRef
    profiles = [
        SchedulingProfileSpec(
            name="latency",
            plugins=[
                ref(plugin_ref="predicted-ttft-scorer", weight=6),
                ref(plugin_ref="precise-prefix-cache-scorer", weight=1),
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


#: The names `weights:` accepts, each to the plugin type it weighs: our type names, and the
#: short camelCase names a team migrating from the managed add-on writes for the same
#: scorers (table in docs/picker.md). The managed schedulers' own weight names (`queue`,
#: `kvCache`, `prefix`, `lru`, `loraAffinity`, `runningRequests`, `predictedLatency`)
#: are all here, so their `weights` carry over verbatim (docs/managed-gateway.md): `prefix`
#: is the default profile's prefix scorer, the precise one (which is the approximate
#: index for pods that publish no KV events), so `prefix: 0` turns prefix affinity off.
SCORER_NAMES: dict[str, str] = {
    "queue-scorer": "queue-scorer",
    "queue": "queue-scorer",
    "queueDepth": "queue-scorer",
    "kv-cache-utilization-scorer": "kv-cache-utilization-scorer",
    "kvCache": "kv-cache-utilization-scorer",
    "kvCacheUtilization": "kv-cache-utilization-scorer",
    "prefix-cache-scorer": "prefix-cache-scorer",
    "prefixCache": "prefix-cache-scorer",
    "precise-prefix-cache-scorer": "precise-prefix-cache-scorer",
    "precisePrefixCache": "precise-prefix-cache-scorer",
    "prefix": "precise-prefix-cache-scorer",
    "lora-affinity-scorer": "lora-affinity-scorer",
    "loraAffinity": "lora-affinity-scorer",
    "running-requests-size-scorer": "running-requests-size-scorer",
    "runningRequests": "running-requests-size-scorer",
    "predicted-ttft-scorer": "predicted-ttft-scorer",
    "predictedTtft": "predicted-ttft-scorer",
    "predictedLatency": "predicted-ttft-scorer",
    "no-hit-lru-scorer": "no-hit-lru-scorer",
    "lru": "no-hit-lru-scorer",
}
# A Literal, so an unknown name fails with its path and the CRD lists the names (built
# from the table; a type checker sees the str it is).
SCORER_TYPES = frozenset(SCORER_NAMES.values())
if TYPE_CHECKING:
    ScorerName = str
else:
    ScorerName = Literal[tuple(SCORER_NAMES)]


def weigh_profile(
    profile: SchedulingProfileSpec, weights: Mapping[str, float]
) -> SchedulingProfileSpec:
    """`profile` under `weights:`: a named scorer takes its weight, a weight of 0 drops it,
    a named scorer the profile lacks joins it (before the picker); the rest stay."""
    wanted = {SCORER_NAMES[name]: weight for name, weight in weights.items()}
    refs = []
    for ref in profile.plugins:
        weight = wanted.pop(ref.plugin_ref, ref.weight)
        if weight != 0:
            refs.append(PluginRef(plugin_ref=ref.plugin_ref, weight=weight))
    # a built-in profile is scorers of `SCORER_NAMES` (named by their type) and its picker
    at = len(refs) - 1 if refs and refs[-1].plugin_ref not in SCORER_TYPES else len(refs)
    refs[at:at] = [PluginRef(plugin_ref=t, weight=w) for t, w in wanted.items() if w]
    return SchedulingProfileSpec(name=profile.name, plugins=refs)


def _default_plugins() -> list[PluginSpec]:
    return default_scheduling()[0]


def _default_profiles() -> list[SchedulingProfileSpec]:
    return default_scheduling()[1]


class ExplainSpec(Spec):
    """Decision explanations without a tracing backend (docs/tracing.md)."""

    recent: int = Field(
        default=10_000,
        ge=0,
        le=1_000_000,
        description="Decisions each replica keeps for `igw explain` and /debug/decisions "
        "(about 1 KiB each); 0 keeps none.",
    )
    header_clients: list[str] = Field(
        default_factory=list,
        max_length=100,
        description="Authenticated client ids (x-igw-client-id) whose requests with "
        "`x-igw-explain: true` get the decision back in `x-igw-explanation`; empty: none.",
    )


class TracingSpec(Spec):
    """OpenTelemetry traces (docs/tracing.md). The exporter's endpoint, headers and the
    resource come from the standard OTEL_* environment variables."""

    enabled: bool = Field(default=False, description="Export spans over OTLP/gRPC.")
    sampling_ratio: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Share of new traces recorded (requests that arrive without a sampled parent).",
    )
    parent_based: bool = Field(
        default=True,
        description="Follow the caller's sampling decision when the request carries one.",
    )
    explain: ExplainSpec = ExplainSpec()


class MigrationSpec(Spec):
    """Resume on break (docs/migration.md): a streamed answer whose pod fails after it
    started goes on from the next-ranked pod, spliced into the same client stream."""

    enabled: bool = Field(default=True, description="Resume streams that break.")
    max_resumes: int = Field(
        default=2, ge=0, le=10, description="Continuations at most per request."
    )
    deadline_ms: int = Field(
        default=30_000,
        ge=100,
        le=600_000,
        description="From a break, the longest wait for a continuation to be answered; "
        "past it the stream ends with the SSE error event.",
    )
    stream_idle_timeout_ms: int = Field(
        default=60_000,
        ge=100,
        le=3_600_000,
        description="The longest silence between two chunks of a started stream that "
        "may be resumed; past it the pod counts as stalled and the stream is resumed.",
    )

    @property
    def resumes(self) -> bool:
        """Whether a broken stream is resumed at all: on, with a continuation allowed (one
        reading for `igw serve`, `igw global` and the fleet simulator)."""
        return self.enabled and self.max_resumes > 0


class GatewayConfigSpec(Spec):
    """`InferenceGatewayConfig.spec`: models, pools, scheduling, flow control, limits."""

    pools: list[PoolSpec] = Field(default_factory=list)
    models: list[ModelSpec] = Field(default_factory=list)
    plugins: list[PluginSpec] = Field(
        default_factory=_default_plugins,
        description="Plugin instances; the built-in ones stay unless one of the same "
        "instance name replaces it.",
    )
    # before schedulingProfiles: the built-in default profile is built from both
    default_profile: str = "latency"
    weights: dict[ScorerName, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        exclude=True,  # dumps carry the weighted profile itself
        description="Scorer name to weight for the built-in default profile; 0 removes "
        "that scorer, scorers not named keep their weights.",
    )
    scheduling_profiles: list[SchedulingProfileSpec] = Field(
        default_factory=list,
        validate_default=True,  # an absent list still gets the built-ins, weighted
        description="Profiles; the built-in latency and throughput profiles stay unless "
        "one of the same name replaces it.",
    )
    objectives: list[ObjectiveSpec] = Field(default_factory=list)
    scrape: ScrapeSpec = ScrapeSpec()
    flow_control: FlowControlSpec = FlowControlSpec()
    rate_limits: list[RateLimitSpec] = Field(default_factory=list)
    tracing: TracingSpec = TracingSpec()
    migration: MigrationSpec = MigrationSpec()

    @field_validator("plugins", mode="after")
    @classmethod
    def _extend_builtin_plugins(cls, given: list[PluginSpec]) -> list[PluginSpec]:
        own = {p.instance_name for p in given}
        return given + [p for p in _default_plugins() if p.instance_name not in own]

    @field_validator("weights", mode="after")
    @classmethod
    def _weights_are_usable(
        cls, weights: dict[str, float], info: ValidationInfo
    ) -> dict[str, float]:
        seen: dict[str, str] = {}
        for name in weights:
            scorer = SCORER_NAMES[name]
            if scorer in seen:
                raise ValueError(f"{seen[scorer]!r} and {name!r} both name {scorer}; keep one")
            seen[scorer] = name
        default = info.data.get("default_profile", "")
        builtin = {p.name: p for p in _default_profiles()}.get(default)
        if builtin is not None and not any(
            r.plugin_ref in SCORER_TYPES for r in weigh_profile(builtin, weights).plugins
        ):
            raise ValueError(f"every scorer of profile {builtin.name!r} is weighted 0")
        return weights

    @field_validator("scheduling_profiles", mode="after")
    @classmethod
    def _extend_builtin_profiles(
        cls, given: list[SchedulingProfileSpec], info: ValidationInfo
    ) -> list[SchedulingProfileSpec]:
        """A config's profiles come on top of the built-ins: a config that adds or retunes
        one profile must not lose the others its models name (`throughput`). The given
        ones keep their positions, so error paths index what the user wrote.

        `weights:` retunes the built-in default profile; a config that also gives a
        profile of that name would have two answers, so it must keep one."""
        own = {p.name for p in given}
        weights, default = info.data.get("weights"), info.data.get("default_profile")
        builtins = _default_profiles()
        if weights:
            for i, profile in enumerate(given):
                if profile.name == default:
                    raise ValueError(
                        f"entry {i} ({default!r}) and `weights` both set the default profile; "
                        "keep one: move the weights into this entry and drop `weights`, or "
                        "drop this entry so `weights` applies to the built-in "
                        f"{default!r}"
                    )
            builtins = [weigh_profile(p, weights) if p.name == default else p for p in builtins]
        return given + [p for p in builtins if p.name not in own]

    @model_validator(mode="after")
    def _references_resolve(self, info: ValidationInfo) -> GatewayConfigSpec:
        problems: list[str] = []
        problems += duplicates("pools", [p.name for p in self.pools])
        problems += duplicates("models", [m.name for m in self.models])
        problems += duplicates("plugins", [p.instance_name for p in self.plugins])
        problems += duplicates("schedulingProfiles", [p.name for p in self.scheduling_profiles])
        pools = {p.name for p in self.pools}
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
        checks: PluginChecks | None = (info.context or {}).get(PLUGIN_CHECKS)
        if checks is not None:
            problems += checks(self)
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


def parse_spec(
    data: Mapping[str, Any], source: str = "<config>", checks: PluginChecks | None = None
) -> GatewayConfigSpec:
    """Validate a mapping: either a bare spec or a whole `InferenceGatewayConfig` resource,
    this project's or the managed add-on's (`config.managed`, converted on the way in by
    `config.convert`: its routing part; its deployment settings are the cluster's, which
    `make synth` renders from environment.yaml). Its shape only, unless `checks` are
    given: the core's (`core.scheduling.config_checks.parse_config`) build every plugin."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, ["<root>: expected a mapping"])
    from inference_gateway.config.managed import is_managed

    if is_managed(data):
        from inference_gateway.config.convert import convert_resource

        data, _ = convert_resource(data, "native", source, checks=checks)
    prefix = ""
    if data.get("kind") == "InferenceGatewayConfig":
        data, prefix = data.get("spec") or {}, "spec"
    try:
        return GatewayConfigSpec.model_validate(data, context={PLUGIN_CHECKS: checks})
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error, prefix)) from None


def read_capped(path: str | Path, max_bytes: int) -> bytes:
    """A file's bytes, or a ConfigError when it holds more than `max_bytes` (read no
    further than that, whatever the file grows to meanwhile) or cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as error:
        raise ConfigError(str(path), [f"<root>: cannot read file: {error.strerror}"]) from None
    if len(data) > max_bytes:
        raise ConfigError(str(path), [f"<root>: the file is over the limit of {max_bytes} bytes"])
    return data


def read_yaml(path: str | Path, max_bytes: int | None = None, *, documents: bool = False) -> Any:
    """One YAML document from a file (every one, as a list, with `documents`; at most
    `max_bytes`, when given); an unreadable or oversized file, bytes that are not UTF-8 or
    bad YAML is a ConfigError."""
    try:
        data = Path(path).read_bytes() if max_bytes is None else read_capped(path, max_bytes)
        text = data.decode("utf-8")
        if documents:
            return [d for d in yaml.load_all(text, Loader=SAFE_LOADER) if d is not None]
        return yaml.load(text, Loader=SAFE_LOADER)
    except OSError as error:
        raise ConfigError(str(path), [f"<root>: cannot read file: {error.strerror}"]) from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            str(path), [f"<root>: not UTF-8 text: {error.reason} at byte {error.start}"]
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), [f"<root>: invalid YAML: {error}"]) from None


def load_spec(path: str | Path, checks: PluginChecks | None = None) -> GatewayConfigSpec:
    """Read and validate (`parse_spec`) a YAML config file of at most `MAX_CONFIG_BYTES`.
    An empty or comment-only file is an error (it would silently drop every model, rate
    limit and objective, as a truncated write or a botched ConfigMap edit does); the
    document `{}` asks for the defaults on purpose."""
    data = read_yaml(path, MAX_CONFIG_BYTES)
    if data is None:
        raise ConfigError(
            str(path),
            ["<root>: the file is empty or holds only comments (write `{}` for the defaults)"],
        )
    return parse_spec(data, str(path), checks)


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
