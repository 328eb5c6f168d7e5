"""The namespace and the CRDs this platform owns: wave `crds`, before anything uses them.

`InferenceGatewayConfig` is rendered from `inference_gateway.config.openapi_v3_schema()`,
so the CRD, the picker and the charts share one schema. The upstream inference CRDs are
pinned copies under `cdk8s/crds/` (see each file's header for source and version).
Gateway API and Envoy Gateway CRDs come with the Envoy Gateway chart (gitops/bootstrap).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from constructs import Construct

from cdk8s import Chart
from inference_gateway.config import API_GROUP, API_VERSION, openapi_v3_schema
from stacks.environment import EnvironmentSpec

from .base import Wave, labels, manifest

__all__ = ["CRD_DIR", "CrdsChart", "gateway_config_crd", "pinned_crds"]

CRD_DIR = Path(__file__).resolve().parent.parent / "crds"

# Large schemas exceed the client-side apply annotation limit; ArgoCD applies them
# server-side.
_SERVER_SIDE = {"argocd.argoproj.io/sync-options": "ServerSideApply=true"}


def pinned_crds() -> list[dict[str, Any]]:
    """The upstream CRDs, in file-name order (stable output)."""
    return [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]


def gateway_config_crd() -> dict[str, Any]:
    """The `InferenceGatewayConfig` CRD, its schema generated from the config models."""
    plural = "inferencegatewayconfigs"
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
                "shortNames": ["igwconfig"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_v3_schema()},
                }
            ],
        },
    }


class CrdsChart(Chart):
    """Namespace (Pod Security `restricted`) and the four CRDs."""

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
        for crd in [gateway_config_crd(), *pinned_crds()]:
            meta = crd["metadata"]
            manifest(
                self,
                meta["name"],
                api_version=crd["apiVersion"],
                kind=crd["kind"],
                name=meta["name"],
                wave=Wave.CRDS,
                labels=labels(name="inference-gateway", component="crd"),
                annotations={**meta.get("annotations", {}), **_SERVER_SIDE},
                body={"spec": crd["spec"]},
            )
