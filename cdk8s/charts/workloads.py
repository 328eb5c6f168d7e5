"""Pod-spec building blocks shared by the picker, the body-based router and vLLM.

One place decides what "hardened" means here (non-root, read-only root filesystem, no
capabilities, seccomp RuntimeDefault), so every Deployment passes the namespace's Pod
Security `restricted` level and checkov the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CPU_LIMIT_SKIP",
    "DIGEST_SKIP",
    "container_security_context",
    "empty_dir",
    "gateway_service_container",
    "pod_security_context",
    "spread",
    "surge_deployment_spec",
]

RUN_AS = 10001

# Reasons for the checkov checks these workloads deliberately do not meet.
CPU_LIMIT_SKIP = {
    "CKV_K8S_11": "CPU limits throttle the latency-critical path; requests reserve the CPU"
}
DIGEST_SKIP = {
    "CKV_K8S_43": "images are pinned by immutable tag in environment.yaml, reviewed per PR",
    "CKV_K8S_15": "IfNotPresent: a pinned image is pulled once per node; Always would make "
    "every pod start (a GPU pod's too) depend on the registry being reachable",
}


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def empty_dir(name: str, *, size: str, memory: bool = False) -> dict[str, Any]:
    """A bounded scratch volume (a read-only root filesystem needs somewhere to write)."""
    spec: dict[str, Any] = {"sizeLimit": size}
    if memory:
        spec = {"medium": "Memory", **spec}
    return {"name": name, "emptyDir": spec}


def spread(selector: dict[str, str]) -> list[dict[str, Any]]:
    """Spread replicas over zones and nodes, best effort, so one failure takes one."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
        for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
    ]


def surge_deployment_spec(
    *,
    replicas: int,
    selector: Mapping[str, str],
    pod_labels: Mapping[str, str],
    pod_spec: Mapping[str, Any],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment spec for a stateless gateway component: a rollout starts one new pod
    before it retires an old one (no dip in routing capacity), and keeps five revisions
    for `kubectl rollout undo`."""
    metadata: dict[str, Any] = {"labels": dict(pod_labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "replicas": replicas,
        "revisionHistoryLimit": 5,
        "selector": {"matchLabels": dict(selector)},
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        "template": {"metadata": metadata, "spec": pod_spec},
    }


def gateway_service_container(
    *,
    image: str,
    name: str,
    args: list[str],
    port: tuple[str, int],
    probe: dict[str, Any],
    mounts: list[dict[str, Any]],
) -> dict[str, Any]:
    """A small gateway service's container (`igw bbr`, `igw auth`, `igw pd-sidecar`): the
    gateway image, one port with its probes, a small bounded footprint, hardened."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "ports": [{"name": port[0], "containerPort": port[1]}],
        "startupProbe": {**probe, "periodSeconds": 2, "failureThreshold": 30},
        "readinessProbe": {**probe, "periodSeconds": 5},
        "livenessProbe": {**probe, "periodSeconds": 10},
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }
