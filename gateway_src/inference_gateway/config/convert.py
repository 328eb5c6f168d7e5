"""Between the managed add-on's `InferenceGatewayConfig` and this project's, both ways.

The managed shape is converted on the way in, not served as a second API: one schema
(`config.spec`) stays the one the picker, the charts and the CRD read, and a managed
file is checked by `config.managed` and mapped here. Where the two overlap the mapping
is exact (docs/managed-gateway.md has the table):

    schedulers[i]             pools[i] (name, modelSelector → selector, targetPort,
                              engineType → engine, routeTimeout → routeTimeoutS) and
                              models[i] (modelName → name, loraAdapters → adapters)
    schedulers[].weights      weights by the same names (`SCORER_NAMES` knows them) when
                              every scheduler has the same, else one profile per
                              scheduler (`scheduler-<name>`: the default profile weighed)
    the rest                  `Deployment`: what this project keeps in environment.yaml,
                              not in the gateway config (certificate, JWT, picker and
                              body-router replicas, leader election, the body limit)

What one shape has and the other cannot carry is never dropped: `to_managed` stores
the patch that restores it (RFC 6902, `config.patch`) in the annotation
`igw.dev/native` of the managed resource, which the managed add-on keeps as any
annotation, and `to_native` plays it back, so native → managed → native is the
identity; every field the patch touches is named in the conversion's notes. A field of
the managed shape this project cannot honour is refused by `config.managed`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inference_gateway.config import patch
from inference_gateway.config.managed import (
    DEFAULT_REPLICAS,
    MANAGED_API_VERSION,
    ManagedConfig,
    ManagedScheduler,
    is_managed,
    parse_duration_s,
    parse_managed,
)
from inference_gateway.config.spec import (
    API_GROUP,
    API_VERSION,
    SCORER_NAMES,
    LabelSelector,
    PluginChecks,
    default_scheduling,
    parse_spec,
    weigh_profile,
)
from inference_gateway.errors import ConfigError

__all__ = [
    "DEPLOYMENT_SOURCE",
    "NATIVE_ANNOTATION",
    "Deployment",
    "NativeParts",
    "Notes",
    "annotation_patch",
    "convert_resource",
    "managed_resource",
    "managed_to_native",
    "native_to_managed",
    "not_carried",
    "translate_problems",
]

NATIVE_ANNOTATION = "igw.dev/native"
#: The managed name of each scorer this project weighs (the inverse of the managed names
#: in `SCORER_NAMES`).
MANAGED_WEIGHT = {
    "queue-scorer": "queue",
    "kv-cache-utilization-scorer": "kvCache",
    "precise-prefix-cache-scorer": "prefix",
    "no-hit-lru-scorer": "lru",
    "lora-affinity-scorer": "loraAffinity",
    "running-requests-size-scorer": "runningRequests",
    "predicted-ttft-scorer": "predictedLatency",
}
#: Where each deployment setting comes from in the managed shape.
DEPLOYMENT_SOURCE = {
    "acm_arn": "spec.tls.acmArn",
    "jwt": "spec.auth.jwt",
    "picker_replicas": "spec.schedulers[].replicas",
    "picker_leader_election": "spec.schedulers[].replicas (a leader is elected above 1)",
    "bbr_enabled": "spec.bbr.enabled",
    "bbr_replicas": "spec.bbr.replicas",
    "max_request_body_bytes": "spec.bbr.maxRequestBodyBytes",
}
Notes = list[str]


@dataclass(frozen=True)
class Deployment:
    """The managed settings this project keeps in environment.yaml rather than in its
    gateway config (envspec/convert.py places them); None: not set, the default.

    `jwt` uses environment.yaml's keys: issuer, jwks_uri, audiences, required_claims."""

    acm_arn: str | None = None
    jwt: dict[str, Any] | None = None
    picker_replicas: int | None = None
    picker_leader_election: bool | None = None
    bbr_enabled: bool | None = None
    bbr_replicas: int | None = None
    max_request_body_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: copy.deepcopy(v) for k, v in vars(self).items() if v is not None}


@dataclass
class NativeParts:
    gateway: dict[str, Any]
    deployment: Deployment
    notes: Notes = field(default_factory=list)


def _selector_out(raw: Any, *, full: bool) -> Any:
    """A selector as written: the plain map where it has no expressions (this project's
    habit), else (and always for the managed shape) the LabelSelector form."""
    selector = LabelSelector.of(raw)
    expressions = [e.model_dump(by_alias=True) for e in selector.match_expressions]
    if not full and not expressions:
        return dict(selector.match_labels)
    out: dict[str, Any] = {"matchLabels": dict(selector.match_labels)}
    if expressions:
        out["matchExpressions"] = expressions
    return out


def _scheduler_weights(s: ManagedScheduler) -> dict[str, float]:
    return s.weights.given() if s.weights is not None else {}


def managed_to_native(config: ManagedConfig) -> NativeParts:
    """This project's gateway spec (raw, camelCase) and deployment settings for a
    validated managed resource; the annotation's patch is the caller's to play (it is
    written against the whole document the caller converts)."""
    spec = config.spec
    pools: list[dict[str, Any]] = []
    models: list[dict[str, Any]] = []
    notes: Notes = []
    for i, s in enumerate(spec.schedulers):
        pool: dict[str, Any] = {
            "name": s.name,
            "selector": _selector_out(s.model_selector, full=False),
        }
        if s.target_port is not None:
            pool["targetPort"] = s.target_port
        if s.engine_type is not None:
            pool["engine"] = s.engine_type
        if s.route_timeout is not None:
            pool["routeTimeoutS"] = int(parse_duration_s(s.route_timeout))
        pools.append(pool)
        model: dict[str, Any] = {"name": s.model_name, "pool": s.name}
        if s.lora_adapters:
            model["adapters"] = list(s.lora_adapters)
        models.append(model)
        if s.scheduler is not None:
            notes.append(
                f"spec.schedulers[{i}].scheduler: {s.scheduler!r} is this project's picker "
                "either way (it has both implementations' scorers)"
            )
    gateway: dict[str, Any] = {"pools": pools, "models": models}
    weights = [_scheduler_weights(s) for s in spec.schedulers]
    if all(w == weights[0] for w in weights):
        if weights[0]:
            gateway["weights"] = dict(weights[0])
    else:
        default = default_scheduling()[1][0]  # the built-in default profile, `latency`
        profiles = []
        for s, given, model in zip(spec.schedulers, weights, models, strict=True):
            if not given:
                continue
            name = f"scheduler-{s.name}"
            weighed = weigh_profile(default, given).model_copy(update={"name": name})
            profiles.append(weighed.model_dump(by_alias=True, exclude_none=True))
            model["profile"] = name
        gateway["schedulingProfiles"] = profiles
    replicas = next((s.replicas for s in spec.schedulers if s.replicas is not None), None)
    effective = DEFAULT_REPLICAS if replicas is None else replicas
    jwt: dict[str, Any] | None = None
    if spec.auth is not None and spec.auth.jwt is not None:
        provider = spec.auth.jwt.provider
        jwt = {"issuer": provider.issuer, "jwks_uri": provider.remote_jwks.uri}
        if provider.audiences:
            jwt["audiences"] = list(provider.audiences)
        if provider.required_claims:
            jwt["required_claims"] = dict(provider.required_claims)
    deployment = Deployment(
        acm_arn=spec.tls.acm_arn,
        jwt=jwt,
        picker_replicas=replicas,
        # the managed schedulers elect a leader whenever they run more than one replica
        picker_leader_election=True if effective > 1 else None,
        bbr_enabled=False if not spec.bbr.enabled else None,
        bbr_replicas=spec.bbr.replicas,
        max_request_body_bytes=spec.bbr.max_request_body_bytes,
    )
    return NativeParts(gateway, deployment, notes)


def _managed_weights(gateway: Mapping[str, Any]) -> dict[str, float] | None:
    """The native `weights` by managed names, or None when one has no managed name."""
    out = {}
    for name, weight in (gateway.get("weights") or {}).items():
        scorer = SCORER_NAMES.get(name)
        managed = MANAGED_WEIGHT.get(scorer or "")
        if managed is None or managed in out:
            return None
        out[managed] = weight
    return out


def native_to_managed(gateway: Mapping[str, Any], deployment: Deployment) -> dict[str, Any]:
    """The managed spec carrying what it can of a (validated, raw) native gateway spec and
    its deployment settings; `convert_resource` and envspec record the rest."""
    default_profile = gateway.get("defaultProfile", "latency")
    weights = _managed_weights(gateway)
    schedulers = []
    for pool in gateway.get("pools") or []:
        served = [m for m in gateway.get("models") or [] if m.get("pool") == pool["name"]]
        if not served:
            continue  # a scheduler needs a modelName: the patch keeps the pool
        model = served[0]
        s: dict[str, Any] = {
            "name": pool["name"],
            "modelName": model["name"],
            "modelSelector": _selector_out(pool.get("selector") or {}, full=True),
        }
        if "targetPort" in pool:
            s["targetPort"] = pool["targetPort"]
        if pool.get("engine") in ("vllm", "sglang"):
            s["engineType"] = pool["engine"]
        s["scheduler"] = "llm-d"
        if weights and model.get("profile", default_profile) == default_profile:
            s["weights"] = dict(weights)
        if deployment.picker_replicas is not None:
            s["replicas"] = deployment.picker_replicas
        if model.get("adapters"):
            s["loraAdapters"] = list(model["adapters"])
        if pool.get("routeTimeoutS") is not None:
            s["routeTimeout"] = f"{pool['routeTimeoutS']}s"
        schedulers.append(s)
    bbr: dict[str, Any] = {"enabled": deployment.bbr_enabled is not False}
    if deployment.bbr_replicas is not None:
        bbr["replicas"] = deployment.bbr_replicas
    if deployment.max_request_body_bytes is not None:
        bbr["maxRequestBodyBytes"] = deployment.max_request_body_bytes
    spec: dict[str, Any] = {
        "bbr": bbr,
        "tls": {"acmArn": deployment.acm_arn} if deployment.acm_arn else {},
        "schedulers": schedulers,
    }
    if deployment.jwt is not None:
        jwt = deployment.jwt
        provider: dict[str, Any] = {
            "issuer": jwt["issuer"],
            "remoteJWKS": {"uri": jwt["jwks_uri"]},
        }
        if jwt.get("audiences"):
            provider["audiences"] = list(jwt["audiences"])
        if jwt.get("required_claims"):
            provider["requiredClaims"] = dict(jwt["required_claims"])
        spec["auth"] = {"jwt": {"provider": provider}}
    return spec


def managed_resource(
    spec: dict[str, Any], name: str, restore: list[dict[str, Any]]
) -> dict[str, Any]:
    """The managed resource around `spec`, with the restoring patch (if any) annotated."""
    metadata: dict[str, Any] = {"name": name}
    if restore:
        metadata["annotations"] = {NATIVE_ANNOTATION: json.dumps(restore, sort_keys=True)}
    return {
        "apiVersion": MANAGED_API_VERSION,
        "kind": "InferenceGatewayConfig",
        "metadata": metadata,
        "spec": spec,
    }


def annotation_patch(config: ManagedConfig, source: str, prefix: str = "") -> list[Any]:
    """The restoring patch a managed resource carries (empty without the annotation)."""
    annotations = config.metadata.get("annotations") or {}
    text = annotations.get(NATIVE_ANNOTATION) if isinstance(annotations, Mapping) else None
    if text is None:
        return []
    where = f"{prefix}metadata.annotations[{NATIVE_ANNOTATION}]"
    try:
        ops = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError as error:
        raise ConfigError(source, [f"{where}: not JSON: {error}"]) from None
    if not isinstance(ops, list):
        raise ConfigError(source, [f"{where}: expected a JSON list of patch operations"])
    return ops


#: Why a field the restoring patch holds has no managed equivalent, where it is not
#: plain (a field with no managed counterpart at all needs no explanation).
WHY = {
    "kubernetes.picker_leader_election": "the managed schedulers elect a leader whenever "
    "they run more than one replica; these pickers run active-active",
}


def not_carried(ops: list[dict[str, Any]], where: str) -> Notes:
    """One note per field the restoring patch holds."""
    notes = []
    for op in ops:
        field_name = patch.field_path(op["path"])
        why = WHY.get(field_name) or (
            "the managed shape implies a value this file leaves unset"
            if op["op"] == "remove"
            else "no field of the managed shape holds it"
        )
        notes.append(f"{field_name}: {why}; kept in {where}")
    return notes


def translate_problems(problems: list[str], schedulers: int, prefix: str = "") -> list[str]:
    """Native field paths of a converted config that come from one scheduler (`pools[i]`
    and `models[i]` are scheduler i's), shown as the managed path the user wrote with the
    native path beside it; `prefix` is where the config sits (`gateway.` in an
    environment file)."""
    native = re.compile(
        rf"(?<![\w.]){re.escape(prefix)}(pools|models)\[(\d+)\]((?:\.\w+|\[\d+\])*)"
    )

    def managed(match: re.Match[str]) -> str:
        if int(match[2]) >= schedulers:
            return match[0]
        return f"{prefix}spec.schedulers[{match[2]}] ({match[0]})"

    out = []
    for problem in problems:
        # a check across fields reports at the spec's root, the field path in its message
        for root in ("<root>: ", f"{prefix}spec: ", "spec: "):
            if problem.startswith(root) and native.match(problem, len(root)):
                problem = problem[len(root) :]
        out.append(native.sub(managed, problem))
    return out


def _native_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A native config's spec, from a resource or a bare spec."""
    if doc.get("kind") == "InferenceGatewayConfig":
        return copy.deepcopy(dict(doc.get("spec") or {}))
    return copy.deepcopy(dict(doc))


def _to_managed(
    doc: Mapping[str, Any], source: str, checks: PluginChecks | None
) -> tuple[dict[str, Any], Notes]:
    parse_spec(doc, source, checks)  # only a valid config is converted
    gateway = _native_document(doc)
    name = str((doc.get("metadata") or {}).get("name") or "igw")
    spec = native_to_managed(gateway, Deployment())
    try:
        back = managed_to_native(parse_managed(managed_resource(spec, name, []), source))
    except ConfigError as error:
        raise ConfigError(
            source, [f"cannot be written in the managed shape: {p}" for p in error.problems]
        ) from None
    restore = patch.diff({"gateway": back.gateway}, {"gateway": gateway})
    where = f"metadata.annotations[{NATIVE_ANNOTATION}]"
    return managed_resource(spec, name, restore), not_carried(restore, where)


def _to_native(
    doc: Mapping[str, Any], source: str, checks: PluginChecks | None
) -> tuple[dict[str, Any], Notes]:
    config = parse_managed(doc, source)
    parts = managed_to_native(config)
    notes = list(parts.notes)
    ops = annotation_patch(config, source)
    document = {"gateway": parts.gateway, "deployment": parts.deployment.as_dict()}
    try:
        document = patch.apply(document, ops)
    except patch.PatchError as error:
        where = f"metadata.annotations[{NATIVE_ANNOTATION}]"
        raise ConfigError(source, [f"{where}{error}"]) from None
    gateway = document.get("gateway") or {}
    for key, value in (document.get("deployment") or {}).items():
        notes.append(
            f"{DEPLOYMENT_SOURCE.get(key, key)}: {json.dumps(value)} is a deployment "
            "setting, which this project keeps in environment.yaml, not in its "
            "InferenceGatewayConfig: convert the environment file to carry it "
            "(docs/managed-gateway.md)"
        )
    if config.metadata.get("namespace"):
        notes.append(
            "metadata.namespace: this project's resource lives in the environment's "
            "namespace (kubernetes.namespace)"
        )
    metadata = {"name": str(config.metadata.get("name") or "igw")}
    native = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "InferenceGatewayConfig",
        "metadata": metadata,
        "spec": gateway,
    }
    try:
        parse_spec(native, source, checks)
    except ConfigError as error:
        problems = translate_problems(error.problems, len(config.spec.schedulers))
        raise ConfigError(source, problems) from None
    return native, notes


def convert_resource(
    doc: Mapping[str, Any],
    to: str | None = None,
    source: str = "<config>",
    *,
    checks: PluginChecks | None,
) -> tuple[dict[str, Any], Notes]:
    """A config resource (or bare native spec) in the other shape, and the notes naming
    what the target shape does not carry. `to` is `native` or `managed`; None: the other
    one than the document's own (told from its apiVersion). A native config is validated
    on the way (with `checks`, the core's that build plugins: `plugin_problems`)."""
    managed = is_managed(doc)
    to = to or ("native" if managed else "managed")
    if to == "native":
        if not managed:
            parse_spec(doc, source, checks)
            return copy.deepcopy(dict(doc)), []
        return _to_native(doc, source, checks)
    if managed:
        parse_managed(doc, source)
        return copy.deepcopy(dict(doc)), []
    return _to_managed(doc, source, checks)
