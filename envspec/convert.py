"""environment.yaml with the managed add-on's `InferenceGatewayConfig` as its `gateway:`.

A team coming from the managed gateway keeps its config as it is:

    gateway:
      apiVersion: inference.sagemaker.aws.amazon.com/v1alpha1
      kind: InferenceGatewayConfig
      metadata: {name: igw}
      spec: {bbr: …, tls: …, auth: …, schedulers: […]}

`load_environment` converts it on the way in (`to_native`), so `make synth` renders the
InferencePools, picker, body-based router, routes, SecurityPolicy and certificates the
native form would, from one schema. The managed spec holds, besides the routing
(`gateway` in the native form, `inference_gateway.config.convert`), settings this
project keeps elsewhere in the environment; each has one home:

    spec.tls.acmArn                   ingress.certificate_arns[<the ARN's region>]
    spec.auth.jwt.provider            kubernetes.auth.jwt (issuer, jwks_uri, audiences,
                                      required_claims)
    spec.schedulers[].replicas        kubernetes.picker_replicas, and above 1
                                      kubernetes.picker_leader_election: true
    spec.bbr.enabled / .replicas      kubernetes.bbr.enabled / .replicas
    spec.bbr.maxRequestBodyBytes      kubernetes.max_request_body_bytes

Setting one both in the managed spec and at its home is an error with both paths.
`to_managed` goes the other way for `igw convert` (the `inference_gateway.converters`
entry point, pyproject.toml): the environment's gateway settings move into a managed
resource, and the patch that restores what the managed shape cannot hold goes into its
`igw.dev/native` annotation, so native → managed → native gives the same file back.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from inference_gateway.config import patch
from inference_gateway.config.convert import (
    DEPLOYMENT_SOURCE,
    NATIVE_ANNOTATION,
    Deployment,
    annotation_patch,
    managed_resource,
    managed_to_native,
    native_to_managed,
    not_carried,
)
from inference_gateway.config.managed import is_managed, parse_managed
from inference_gateway.errors import ConfigError

__all__ = ["convert", "is_managed_environment", "kind", "matches", "to_managed", "to_native"]

kind = "environment"
CONFIG_NAME = "igw"  # the InferenceGatewayConfig the charts render (charts/picker.py)
_ARN_REGION = 3  # arn:partition:service:REGION:account:…


def is_managed_environment(data: object) -> bool:
    return isinstance(data, Mapping) and is_managed(data.get("gateway"))


def matches(document: Mapping[str, Any]) -> bool:
    """An environment file (its name, AWS side and node groups), in either shape."""
    return {"aws", "cluster", "node_groups", "gateway"} <= set(document)


def _pop_empty(parent: dict[str, Any], key: str) -> None:
    if isinstance(parent.get(key), dict) and not parent[key]:
        del parent[key]


def _extract(env: Mapping[str, Any]) -> tuple[dict[str, Any], Deployment]:
    """The environment without its gateway settings, and those settings."""
    rest = copy.deepcopy(dict(env))
    rest.pop("gateway", None)
    region = (rest.get("aws") or {}).get("region")
    ingress = rest.get("ingress") or {}
    arns = ingress.get("certificate_arns") or {}
    acm_arn = arns.pop(region, None) if isinstance(arns, dict) else None
    if "ingress" in rest:
        _pop_empty(ingress, "certificate_arns")
        _pop_empty(rest, "ingress")
    k8s = rest.get("kubernetes") or {}
    auth = k8s.get("auth") or {}
    jwt = auth.pop("jwt", None) if isinstance(auth, dict) else None
    bbr = k8s.pop("bbr", None) or {}
    deployment = Deployment(
        acm_arn=acm_arn,
        jwt=jwt,
        picker_replicas=k8s.pop("picker_replicas", None),
        picker_leader_election=k8s.pop("picker_leader_election", None),
        bbr_enabled=bbr.get("enabled"),
        bbr_replicas=bbr.get("replicas"),
        max_request_body_bytes=k8s.pop("max_request_body_bytes", None),
    )
    if "kubernetes" in rest:
        _pop_empty(k8s, "auth")
        _pop_empty(rest, "kubernetes")
    return rest, deployment


def _place(
    env: Mapping[str, Any], gateway: dict[str, Any], deployment: Deployment, source: str
) -> dict[str, Any]:
    """`env` with the native gateway spec in `gateway:`'s place and each deployment
    setting at its home; a setting found at its home already is a conflict."""
    out = {key: (gateway if key == "gateway" else copy.deepcopy(v)) for key, v in env.items()}
    problems: list[str] = []

    def home(parents: list[str], key: str, value: Any, setting: str) -> None:
        node = out
        for name in parents:
            if not isinstance(node.get(name), dict):
                node[name] = {}
            node = node[name]
        if key in node:
            problems.append(
                f"gateway.{DEPLOYMENT_SOURCE[setting]}: also set as {'.'.join(parents)}.{key}; "
                "keep one"
            )
        node[key] = value

    if deployment.acm_arn is not None:
        region = deployment.acm_arn.split(":")[_ARN_REGION]
        home(["ingress", "certificate_arns"], region, deployment.acm_arn, "acm_arn")
    if deployment.jwt is not None:
        home(["kubernetes", "auth"], "jwt", deployment.jwt, "jwt")
    for setting in ("picker_replicas", "picker_leader_election", "max_request_body_bytes"):
        value = getattr(deployment, setting)
        if value is not None:
            home(["kubernetes"], setting, value, setting)
    if deployment.bbr_enabled is not None:
        home(["kubernetes", "bbr"], "enabled", deployment.bbr_enabled, "bbr_enabled")
    if deployment.bbr_replicas is not None:
        home(["kubernetes", "bbr"], "replicas", deployment.bbr_replicas, "bbr_replicas")
    if problems:
        raise ConfigError(source, problems)
    return out


def to_native(
    env: Mapping[str, Any], source: str = "<environment>"
) -> tuple[dict[str, Any], list[str]]:
    """An environment whose `gateway:` is a managed resource, in the native form; notes
    name what the native form does not keep. A native environment comes back as it is."""
    if not is_managed_environment(env):
        return copy.deepcopy(dict(env)), []
    config = parse_managed(env["gateway"], source, prefix="gateway.")
    parts = managed_to_native(config)
    out = _place(env, parts.gateway, parts.deployment, source)
    ops = annotation_patch(config, source, prefix="gateway.")
    try:
        out = patch.apply(out, ops)
    except patch.PatchError as error:
        where = f"gateway.metadata.annotations[{NATIVE_ANNOTATION}]"
        raise ConfigError(source, [f"{where}{error}"]) from None
    return out, [f"gateway.{note}" for note in parts.notes]


def to_managed(
    env: Mapping[str, Any], source: str = "<environment>"
) -> tuple[dict[str, Any], list[str]]:
    """A (valid) native environment with its gateway settings as a managed resource in
    `gateway:`; notes name each field the managed shape cannot hold (kept in the
    resource's annotation). A managed environment comes back as it is."""
    from envspec.environment import validate_environment

    if is_managed_environment(env):
        validate_environment(env, source)
        return copy.deepcopy(dict(env)), []
    validate_environment(env, source)
    rest, deployment = _extract(env)
    spec = native_to_managed(env["gateway"], deployment)
    unpatched = {**rest, "gateway": managed_resource(spec, CONFIG_NAME, [])}
    try:
        back, _ = to_native(unpatched, source)
    except ConfigError as error:
        raise ConfigError(
            source, [f"cannot be written in the managed shape: {p}" for p in error.problems]
        ) from None
    restore = patch.diff(back, dict(env))
    resource = managed_resource(spec, CONFIG_NAME, restore)
    out = {key: (resource if key == "gateway" else value) for key, value in unpatched.items()}
    out = {key: out[key] for key in env if key in out} | out  # the file's key order
    where = f"gateway.metadata.annotations[{NATIVE_ANNOTATION}]"
    return out, not_carried(restore, where)


def convert(
    document: Mapping[str, Any], to: str | None, source: str
) -> tuple[dict[str, Any], list[str]]:
    """`igw convert`'s hook: the environment in the other shape (or in `to`)."""
    managed = is_managed_environment(document)
    target = to or ("native" if managed else "managed")
    if target == "native":
        out, notes = to_native(document, source)
        from envspec.environment import validate_environment

        validate_environment(out, source)
        return out, notes
    return to_managed(document, source)
