"""The managed add-on's `InferenceGatewayConfig` (`inference.sagemaker.aws.amazon.com/
v1alpha1`), read as it is written, and checked before it is converted.

A team that runs the SageMaker HyperPod Inference Gateway, or follows its docs, writes

    apiVersion: inference.sagemaker.aws.amazon.com/v1alpha1
    kind: InferenceGatewayConfig
    spec:
      bbr: {enabled: true, replicas: 2, maxRequestBodyBytes: 4194304}
      tls: {}                                  # or {acmArn: arn:aws:acm:…}
      auth: {jwt: {provider: {issuer, remoteJWKS: {uri}, audiences, requiredClaims}}}
      observability: {metrics: {enabled: true}}
      schedulers:
        - {name, modelName, modelSelector, targetPort, appProtocol, scheduler: llm-d|epp,
           engineType: vllm|sglang, weights: {queue, kvCache, prefix, lru, loraAffinity,
           runningRequests, predictedLatency}, replicas, loraAdapters, routeTimeout}

and this module reads exactly that: the same field names, unknown keys refused (the
managed CRD is closed too), every problem with its field path. `config.convert` turns it
into this project's form; what this project cannot do is refused here, by name and
reason, never dropped on the way (docs/managed-gateway.md has the table and the sources).

The rules the managed documentation states and this module enforces: `tls` is required
(`tls: {}` asks for an issued certificate); `bbr.enabled: false` only with one
scheduler; the `lru` weight only with `scheduler: llm-d`; `weights` or `configMapRef`,
not both. The rest are this project's limits, each with why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from inference_gateway.config.checks import duplicates, format_validation_error
from inference_gateway.config.spec import LabelSelector
from inference_gateway.errors import ConfigError

__all__ = [
    "DEFAULT_REPLICAS",
    "MANAGED_API_VERSION",
    "MANAGED_GROUP",
    "ManagedBbr",
    "ManagedConfig",
    "ManagedScheduler",
    "ManagedSpec",
    "ManagedWeights",
    "is_managed",
    "parse_duration_s",
    "parse_managed",
]

MANAGED_GROUP = "inference.sagemaker.aws.amazon.com"
#: A scheduler's replicas when unset ("The default is `2`": the managed workshop, first
#: gateway page; docs/managed-gateway.md), its body-based router's too.
DEFAULT_REPLICAS = 2
MANAGED_API_VERSION = f"{MANAGED_GROUP}/v1alpha1"

#: Gateway API `Duration` (gateway.networking.k8s.io, `HTTPRouteTimeouts`), the form a
#: route timeout takes in the HTTPRoute the managed controller renders: 1-4 parts of
#: up to 5 digits, each h, m, s or ms.
_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
_DURATION_PART = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_ACM_ARN = r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/[A-Za-z0-9-]+$"


def parse_duration_s(text: str) -> float:
    """Seconds of a Gateway API duration (`"90s"`, `"1m30s"`, `"500ms"`)."""
    if not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration like 300s, 5m or 1m30s")
    return sum(int(n) * _UNIT_S[unit] for n, unit in _DURATION_PART.findall(text))


class _Managed(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ManagedWeights(_Managed):
    """A scheduler's scorer weights, by the managed names (`config.spec.SCORER_NAMES` maps
    each to the scorer it weighs here)."""

    queue: int | float | None = Field(default=None, ge=0)
    kv_cache: int | float | None = Field(default=None, ge=0)
    prefix: int | float | None = Field(default=None, ge=0)
    lru: int | float | None = Field(default=None, ge=0)
    lora_affinity: int | float | None = Field(default=None, ge=0)
    running_requests: int | float | None = Field(default=None, ge=0)
    predicted_latency: int | float | None = Field(default=None, ge=0)

    def given(self) -> dict[str, int | float]:
        """The weights written, by their managed (wire) names."""
        return {
            type(self).model_fields[name].alias or name: value
            for name, value in self
            if value is not None
        }


class ManagedScheduler(_Managed):
    """One `spec.schedulers[]` entry: a model, its pods, how to pick among them."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    model_name: str = Field(min_length=1)
    model_selector: LabelSelector
    target_port: int | None = Field(default=None, ge=1, le=65535)
    app_protocol: Literal["http", "kubernetes.io/h2c"] | None = None
    scheduler: Literal["llm-d", "epp"] | None = None
    engine_type: Literal["vllm", "sglang"] | None = None
    weights: ManagedWeights | None = None
    config_map_ref: dict[str, Any] | None = None
    replicas: int | None = Field(default=None, ge=1)
    lora_adapters: list[str] = Field(default_factory=list)
    route_timeout: str | None = None
    log_level: str | None = None


class ManagedBbr(_Managed):
    enabled: bool = True
    replicas: int | None = Field(default=None, ge=1)
    default_backend: str | None = None
    max_request_body_bytes: int | None = Field(default=None, ge=1024, le=64 * 2**20)


class ManagedTls(_Managed):
    acm_arn: str | None = Field(default=None, pattern=_ACM_ARN)


class RemoteJwks(_Managed):
    uri: str = Field(pattern=r"^https://")


class JwtProvider(_Managed):
    issuer: str = Field(pattern=r"^https://")
    remote_jwks: RemoteJwks = Field(alias="remoteJWKS")
    audiences: list[str] = Field(default_factory=list)
    required_claims: dict[str, str] = Field(default_factory=dict)


class ManagedJwt(_Managed):
    provider: JwtProvider


class ManagedAuth(_Managed):
    jwt: ManagedJwt | None = None


class ManagedMetrics(_Managed):
    enabled: bool = True


class ManagedObservability(_Managed):
    metrics: ManagedMetrics = ManagedMetrics()


class ManagedSpec(_Managed):
    schedulers: list[ManagedScheduler] = Field(min_length=1)
    bbr: ManagedBbr = ManagedBbr()
    tls: ManagedTls
    auth: ManagedAuth | None = None
    observability: ManagedObservability | None = None
    pod_defaults: dict[str, Any] | None = None


class ManagedConfig(BaseModel):
    """The whole resource; `status` (as `kubectl get -o yaml` prints it) is ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["inference.sagemaker.aws.amazon.com/v1alpha1"]
    kind: Literal["InferenceGatewayConfig"]
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ManagedSpec
    status: dict[str, Any] | None = None


def is_managed(data: object) -> bool:
    """A mapping that is the managed add-on's resource (by its API group)."""
    return isinstance(data, Mapping) and str(data.get("apiVersion", "")).startswith(
        f"{MANAGED_GROUP}/"
    )


#: What this project cannot do, refused with why (docs/managed-gateway.md).
_UNSUPPORTED = {
    "configMapRef": "a plugin config held in a cluster ConfigMap cannot be rendered from "
    "git; write its plugins and schedulingProfiles in this project's own config, or use "
    "`weights`",
    "logLevel": "this project's picker logs at INFO, one line per event; leave it out",
    "defaultBackend": "a model no scheduler serves is answered 404 in OpenAI shape here, "
    "not sent to a default scheduler; leave it out",
    "podDefaults": "this project's pods take their placement and resources from "
    "environment.yaml (node_groups, model_servers) and its charts; leave it out",
}


def _problems(spec: ManagedSpec) -> list[str]:
    """The managed documentation's rules between fields, and this project's refusals."""
    problems: list[str] = []
    where = "spec.schedulers"
    problems += duplicates(where, [s.name for s in spec.schedulers])
    model_scheduler: dict[str, str] = {}
    for i, s in enumerate(spec.schedulers):
        at = f"{where}[{i}]"
        if s.model_name in model_scheduler:
            problems.append(
                f"{at}.modelName: {s.model_name!r} is already scheduler "
                f"{model_scheduler[s.model_name]!r}'s model (the body-based router matches "
                "one scheduler per model)"
            )
        model_scheduler.setdefault(s.model_name, s.name)
        if s.weights is not None and s.config_map_ref is not None:
            problems.append(f"{at}.configMapRef: set weights or configMapRef, not both")
        if s.config_map_ref is not None:
            problems.append(f"{at}.configMapRef: not supported: {_UNSUPPORTED['configMapRef']}")
        if s.log_level is not None:
            problems.append(f"{at}.logLevel: not supported: {_UNSUPPORTED['logLevel']}")
        if s.weights is not None and s.weights.lru is not None and s.scheduler == "epp":
            problems.append(
                f"{at}.weights.lru: valid only with scheduler: llm-d (the managed "
                "documentation's rule; the epp picker has no LRU scorer)"
            )
        if s.app_protocol == "kubernetes.io/h2c":
            problems.append(
                f"{at}.appProtocol: not supported: the model servers here (vLLM, SGLang) are "
                "reached over HTTP/1.1 (`http`, the InferencePool default)"
            )
        if s.route_timeout is not None:
            try:
                seconds = parse_duration_s(s.route_timeout)
            except ValueError as error:
                problems.append(f"{at}.routeTimeout: {error}")
            else:
                if seconds < 1 or seconds != int(seconds):
                    problems.append(
                        f"{at}.routeTimeout: {s.route_timeout} is not a whole number of "
                        "seconds, 1 or more"
                    )
        for j, adapter in enumerate(s.lora_adapters):
            if not adapter:
                problems.append(f"{at}.loraAdapters[{j}]: empty adapter name")
        problems += duplicates(f"{at}.loraAdapters", s.lora_adapters)
    counts = [DEFAULT_REPLICAS if s.replicas is None else s.replicas for s in spec.schedulers]
    for i, count in enumerate(counts):
        if count != counts[0]:
            problems.append(
                f"{where}[{i}].replicas: {count}, but schedulers[0] runs {counts[0]} (unset "
                f"is {DEFAULT_REPLICAS}): one picker Deployment serves every scheduler here, "
                "so they share one replica count"
            )
    if not spec.bbr.enabled and len(spec.schedulers) > 1:
        problems.append(
            "spec.bbr.enabled: bbr must be enabled when more than one scheduler is defined "
            "(the managed admission rule: without it nothing tells the models apart)"
        )
    if spec.bbr.default_backend is not None:
        problems.append(f"spec.bbr.defaultBackend: not supported: {_UNSUPPORTED['defaultBackend']}")
    observability = spec.observability
    if observability is not None and not observability.metrics.enabled:
        problems.append(
            "spec.observability.metrics.enabled: false is not supported: the alarms, the "
            "dashboards and KEDA's scaling read the picker's and the pods' metrics"
        )
    if spec.pod_defaults is not None:
        problems.append(f"spec.podDefaults: not supported: {_UNSUPPORTED['podDefaults']}")
    return problems


def parse_managed(data: Any, source: str = "<managed config>", prefix: str = "") -> ManagedConfig:
    """The managed resource, validated; one `ConfigError` with every problem's field path
    (`prefix` goes before each, e.g. `gateway.` inside an environment file)."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, [f"{prefix or '<root>'}: expected a mapping"])
    try:
        config = ManagedConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error, prefix.rstrip("."))) from None
    problems = _problems(config.spec)
    if problems:
        raise ConfigError(source, [f"{prefix}{p}" for p in problems])
    return config
