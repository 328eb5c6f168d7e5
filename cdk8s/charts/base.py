"""One way to emit a manifest, derived names and labels, and the ArgoCD sync waves.

Every chart goes through `manifest()`: cdk8s's plain `ApiObject` drops props other than
`metadata` under jsii, so the body is added with JSON patches, key by key, in the order
given (the rendered YAML reads like a hand-written manifest). Sync waves and checkov
skips are annotations, set here so that no chart spells an annotation key itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from constructs import Construct

from cdk8s import ApiObject, ApiObjectMetadata, JsonPatch
from stacks.environment import EnvironmentSpec

__all__ = [
    "BBR",
    "BUILTIN_GROUPS",
    "GATEWAY",
    "GATEWAY_CLASS",
    "PART_OF",
    "PICKER",
    "PROXY_CONFIG",
    "SKIP_DRY_RUN",
    "Wave",
    "ecr_registry",
    "gateway_image",
    "labels",
    "manifest",
    "selector_labels",
]

PART_OF = "inference-gateway"
GATEWAY = "igw"
GATEWAY_CLASS = "igw-envoy"
PROXY_CONFIG = "igw-proxy"
PICKER = "igw-picker"
BBR = "igw-bbr"
#: On every custom resource: Argo CD must not fail the whole sync's dry run while the
#: resource's CRD (installed earlier in the sync, or by another Application) is not
#: established yet (Argo CD docs, "Sync Options": SkipDryRunOnMissingResource).
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
SKIP_DRY_RUN = {SYNC_OPTIONS: "SkipDryRunOnMissingResource=true"}
#: API groups Kubernetes serves itself; anything else is a custom resource.
BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "autoscaling",
        "batch",
        "policy",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        "storage.k8s.io",
    }
)


class Wave(StrEnum):
    """ArgoCD sync waves: CRDs, then controllers, then their config, then workloads.

    The picker's ConfigMap syncs with the picker (wave `controllers`), since a pod whose
    volume is missing never turns healthy and would stall the wave.
    """

    NAMESPACE = "-2"
    CRDS = "-1"
    CONTROLLERS = "0"
    CONFIG = "1"
    WORKLOADS = "2"


def labels(*, name: str, component: str, instance: str | None = None) -> dict[str, str]:
    """The recommended `app.kubernetes.io/*` labels, derived from the workload's name."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": instance or name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "cdk8s",
    }


def selector_labels(all_labels: Mapping[str, str]) -> dict[str, str]:
    """The immutable subset a Deployment selects on (never `managed-by` or versions)."""
    keys = ("app.kubernetes.io/name", "app.kubernetes.io/instance")
    return {k: all_labels[k] for k in keys if k in all_labels}


def gateway_image(env: EnvironmentSpec) -> str:
    """The gateway image in the environment's ECR registry (pushed by the CDK app, whose
    ImagesStack names the repository `igw-<env>/gateway`), by digest when one is given.

    The registry named here is the primary region's; the ApplicationSet rewrites it to
    each cluster's own region (`kustomize.images`, gitops/bootstrap), where ECR
    replication has copied the image, so no cluster pulls across regions.
    """
    k8s = env.kubernetes
    repository = k8s.image_repository or f"igw-{env.name}/gateway"
    name = f"{ecr_registry(env.aws.account, env.aws.region)}/{repository}"
    if k8s.image_digest:
        return f"{name}@{k8s.image_digest}"
    return f"{name}:{k8s.image_tag}"


def ecr_registry(account: str, region: str) -> str:
    return f"{account}.dkr.ecr.{region}.amazonaws.com"


def manifest(
    scope: Construct,
    construct_id: str,
    *,
    api_version: str,
    kind: str,
    name: str,
    wave: Wave,
    body: Mapping[str, Any],
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    checkov_skips: Mapping[str, str] | None = None,
) -> ApiObject:
    """Emit one Kubernetes object; `checkov_skips` maps a check id to its reason."""
    notes = {"argocd.argoproj.io/sync-wave": wave.value, **(annotations or {})}
    if api_version.rpartition("/")[0] not in BUILTIN_GROUPS:
        notes.setdefault(SYNC_OPTIONS, SKIP_DRY_RUN[SYNC_OPTIONS])
    for i, (check, reason) in enumerate(sorted((checkov_skips or {}).items()), start=1):
        notes[f"checkov.io/skip{i}"] = f"{check}={reason}"
    obj = ApiObject(
        scope,
        construct_id,
        api_version=api_version,
        kind=kind,
        metadata=ApiObjectMetadata(
            name=name, namespace=namespace, labels=dict(labels or {}), annotations=notes
        ),
    )
    for key, value in body.items():
        obj.add_json_patch(JsonPatch.add(f"/{key}", value))
    return obj
