"""The namespace and the CRD this platform owns (wave `crds`, before anything uses them),
and the upstream GIE CRDs, rendered apart into `gitops/crds/`.

`InferenceGatewayConfig` is rendered from `inference_gateway.config.spec.openapi_v3_schema()`,
so the CRD, the picker and the charts share one schema; its `status` is written by the
picker (conditions, per-pool ready/stale counts) and read with `kubectl get igwc`. The
upstream inference CRDs are pinned copies under `cdk8s/crds/` (see each file's header for
source and version); their own Application syncs them in wave -1 of the bootstrap, before
Envoy Gateway and the AI Gateway controller that watch InferencePools. Gateway API and
Envoy Gateway CRDs come with the Envoy Gateway chart (gitops/bootstrap).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec
from inference_gateway.config.spec import API_GROUP, API_VERSION, openapi_v3_schema
from inference_gateway.kubernetes.config_status import ROLLOUT_STATES

from .base import Wave, labels, manifest

__all__ = [
    "CRD_DIR",
    "CrdsChart",
    "GieCrdsChart",
    "gateway_config_crd",
    "gateway_config_status_schema",
    "pinned_crds",
]

CRD_DIR = Path(__file__).resolve().parent.parent / "crds"

# Large schemas exceed the client-side apply annotation limit; ArgoCD applies them
# server-side.
_SERVER_SIDE = {"argocd.argoproj.io/sync-options": "ServerSideApply=true"}


def pinned_crds() -> list[dict[str, Any]]:
    """The upstream CRDs, in file-name order (stable output)."""
    return [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]


def gateway_config_status_schema() -> dict[str, Any]:
    """What the picker writes to `status` (`inference_gateway.kubernetes.config_status`):
    API-convention conditions `Accepted`, `Ready`, `Degraded`, and pod counts per pool."""
    count = {"type": "integer", "minimum": 0}
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string", "maxLength": 32768},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "minimum": 0},
        },
    }
    return {
        "type": "object",
        "properties": {
            "observedGeneration": {"type": "integer", "minimum": 0},
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "pools": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "ready": count,
                        "stale": count,
                        "total": count,
                    },
                },
            },
            # the managed add-on's per-scheduler rollout state (a pool is a scheduler)
            "schedulers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "rolloutState"],
                    "properties": {
                        "name": {"type": "string"},
                        "rolloutState": {"type": "string", "enum": list(ROLLOUT_STATES)},
                    },
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "readyPods": count,
            "stalePods": count,
        },
    }


def _condition_column(kind: str, field: str) -> str:
    return f'.status.conditions[?(@.type=="{kind}")].{field}'


def gateway_config_crd() -> dict[str, Any]:
    """The `InferenceGatewayConfig` CRD, its schema generated from the config models."""
    plural = "inferencegatewayconfigs"
    schema = dict(openapi_v3_schema())
    schema["properties"] = {
        **schema.get("properties", {}),
        "status": gateway_config_status_schema(),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": "InferenceGatewayConfig",
                "listKind": "InferenceGatewayConfigList",
                "plural": plural,
                "singular": "inferencegatewayconfig",
                # `igwc`, as a team migrating from the managed add-on types it.
                "shortNames": ["igwc", "igwconfig"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            "name": "Accepted",
                            "type": "string",
                            "jsonPath": _condition_column("Accepted", "status"),
                        },
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": _condition_column("Ready", "status"),
                        },
                        {"name": "Ready Pods", "type": "integer", "jsonPath": ".status.readyPods"},
                        {"name": "Stale Pods", "type": "integer", "jsonPath": ".status.stalePods"},
                        {
                            "name": "Degraded",
                            "type": "string",
                            "jsonPath": _condition_column("Degraded", "reason"),
                        },
                        {
                            "name": "Age",
                            "type": "date",
                            "jsonPath": ".metadata.creationTimestamp",
                        },
                    ],
                }
            ],
        },
    }


class GieCrdsChart(Chart):
    """The pinned upstream GIE CRDs, for the `gitops/crds/` Application."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        for crd in pinned_crds():
            _crd(self, crd)


def _crd(scope: Construct, crd: dict[str, Any]) -> None:
    meta = crd["metadata"]
    manifest(
        scope,
        meta["name"],
        api_version=crd["apiVersion"],
        kind=crd["kind"],
        name=meta["name"],
        wave=Wave.CRDS,
        labels=labels(name="inference-gateway", component="crd"),
        annotations={**meta.get("annotations", {}), **_SERVER_SIDE},
        body={"spec": crd["spec"]},
    )


class CrdsChart(Chart):
    """Namespace (Pod Security `restricted`), our CRD, the Secrets Manager store."""

    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        namespace = env.kubernetes.namespace
        manifest(
            self,
            "namespace",
            api_version="v1",
            kind="Namespace",
            name=namespace,
            wave=Wave.NAMESPACE,
            labels={
                **labels(name="inference-gateway", component="namespace"),
                # Every pod here, vLLM included, runs non-root with no capabilities.
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            },
            body={},
        )
        _crd(self, gateway_config_crd())
        # The Hugging Face token and the API keys come from Secrets Manager in the
        # environment's primary region (External Secrets, installed by gitops/bootstrap;
        # its role comes through Pod Identity, stacks/parts/pod_identity.py).
        manifest(
            self,
            "secret-store",
            api_version="external-secrets.io/v1",
            kind="ClusterSecretStore",
            name="aws-secrets-manager",
            wave=Wave.CONFIG,
            labels=labels(name="inference-gateway", component="secrets"),
            body={
                "spec": {
                    "provider": {"aws": {"service": "SecretsManager", "region": env.aws.region}}
                }
            },
        )
