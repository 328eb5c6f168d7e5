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
from envspec.environment import EnvironmentSpec
from envspec.workloads import ROUTE_TIMEOUT_S  # the routes' timeout; a pool may set less

__all__ = [
    "BBR",
    "BUILTIN_GROUPS",
    "DOCKER_HUB_CACHE_PREFIX",
    "GATEWAY",
    "GATEWAY_CLASS",
    "PART_OF",
    "PICKER",
    "PROXY_CONFIG",
    "ROUTE_TIMEOUT_S",
    "SKIP_DRY_RUN",
    "Wave",
    "ecr_registry",
    "gateway_image",
    "gateway_repository",
    "labels",
    "manifest",
    "model_server_image",
    "region_images",
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


def gateway_image(env: EnvironmentSpec, *, region: str | None = None) -> str:
    """The gateway image in the environment's ECR registry (pushed by the CDK app, whose
    ImagesStack names the repository `igw-<env>/gateway`), by digest when one is given.

    The registry named here is the primary region's; each region's overlay
    (`region_images`, gitops/environments/<env>/regions/<region>/) points the cluster
    there at its own region's registry, where ECR replication has copied the image.
    Manifests rendered for one region (the global routers') name that region's.
    """
    k8s = env.kubernetes
    registry = ecr_registry(env.aws.account, region or env.aws.region)
    name = f"{registry}/{gateway_repository(env)}"
    if k8s.image_digest:
        return f"{name}@{k8s.image_digest}"
    return f"{name}:{k8s.image_tag}"


def gateway_repository(env: EnvironmentSpec) -> str:
    return env.kubernetes.image_repository or f"igw-{env.name}/gateway"


def ecr_registry(account: str, region: str) -> str:
    return f"{account}.dkr.ecr.{region}.amazonaws.com"


#: The ECR repository prefix of the Docker Hub pull-through cache (stacks/parts/images.py).
DOCKER_HUB_CACHE_PREFIX = "docker-hub"


def _split_image(image: str) -> tuple[str, str]:
    """`vllm/vllm-openai:v0.11.0` -> (`vllm/vllm-openai`, `v0.11.0`); a port is no tag."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, ""
    return name, tag


def _from_docker_hub(name: str) -> bool:
    """An image name without a registry host (`vllm/vllm-openai`, `ubuntu`)."""
    first = name.split("/", 1)[0]
    return "/" not in name or not ("." in first or ":" in first or first == "localhost")


def model_server_image(
    env: EnvironmentSpec, *, image: str, digest: str | None, region: str | None = None
) -> str:
    """A model server's image as a cluster of `region` (default: the primary) pulls it: a
    Docker Hub image through that region's pull-through cache when the environment has one
    there (`aws.docker_hub_cache_credentials`), by digest when one is given; other
    registries as written."""
    region = region or env.aws.region
    name, tag = _split_image(image)
    if region in env.aws.docker_hub_cache_credentials and _from_docker_hub(name):
        path = name if "/" in name else f"library/{name}"
        name = f"{ecr_registry(env.aws.account, region)}/{DOCKER_HUB_CACHE_PREFIX}/{path}"
    if digest:
        return f"{name}@{digest}"
    return f"{name}:{tag}" if tag else name


def _image_name(image: str) -> str:
    """The name Kustomize's `images` match on: without tag or digest."""
    return _split_image(image.partition("@")[0])[0]


def region_images(env: EnvironmentSpec, region: str) -> list[dict[str, str]]:
    """Kustomize `images` entries that turn every image of the rendered manifests (which
    name the primary region's) into the one `region` pulls: the gateway from its own
    registry (replicated), model servers through its own Docker Hub cache (or Docker Hub
    itself where it has none). Tags and digests are kept; none for the primary region."""
    if region == env.aws.region:
        return []
    primary = ecr_registry(env.aws.account, env.aws.region) + "/"
    local = ecr_registry(env.aws.account, region) + "/"
    gateway = _image_name(gateway_image(env))
    moves = {gateway: local + gateway.removeprefix(primary)}
    for server in env.model_servers:
        rendered = _image_name(model_server_image(env, image=server.image, digest=None))
        there = _image_name(model_server_image(env, image=server.image, digest=None, region=region))
        moves[rendered] = there
    return [{"name": n, "newName": moves[n]} for n in sorted(moves) if moves[n] != n]


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
