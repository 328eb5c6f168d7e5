"""The ArgoCD side, rendered into `gitops/bootstrap/`: project, controllers, and the
ApplicationSet that turns every `gitops/environments/<env>/` into an app; the root
Application that syncs this folder is in `gitops/bootstrap/root/`.

From the root on, ArgoCD manages itself from git. Automated sync with prune and
self-heal: git is the only way to change the cluster, so a rollback is a `git revert`
(docs/operations.md). Waves order
the controllers (Envoy Gateway, whose chart brings the Gateway API CRDs) before the
environments, whose own manifests carry waves CRDs → controllers → config → workloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from constructs import Construct

from cdk8s import Chart
from stacks.environment import EnvironmentSpec

from .base import PART_OF, Wave, labels, manifest

__all__ = [
    "ARGOCD_NAMESPACE",
    "ENVOY_GATEWAY_CHART",
    "ENVOY_GATEWAY_VERSION",
    "PROJECT",
    "BootstrapChart",
    "RootChart",
    "repo_of",
]

ARGOCD_NAMESPACE = "argocd"
ARGO_API = "argoproj.io/v1alpha1"
PROJECT = PART_OF
ENV_LABEL = "igw.dev/environment"
ENVOY_GATEWAY_CHART = "docker.io/envoyproxy"
ENVOY_GATEWAY_VERSION = "v1.5.0"
_AUTOMATED = {"prune": True, "selfHeal": True}
_RETRY = {"limit": 5, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}}


def repo_of(envs: Sequence[EnvironmentSpec]) -> tuple[str, str]:
    """The one git repository and revision every environment syncs from."""
    for field in ("repo_url", "revision"):
        values = sorted({getattr(e.gitops, field) for e in envs})
        if len(values) != 1:
            raise ValueError(f"gitops.{field}: environments disagree ({values}); one tree")
    return envs[0].gitops.repo_url, envs[0].gitops.revision


class BootstrapChart(Chart):
    def __init__(
        self, scope: Construct, construct_id: str, *, envs: Sequence[EnvironmentSpec]
    ) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        repo, revision = repo_of(envs)
        common = {"namespace": ARGOCD_NAMESPACE, "labels": labels(name=PROJECT, component="gitops")}
        sync = {"automated": _AUTOMATED, "retry": _RETRY}
        namespaces = sorted({e.kubernetes.namespace for e in envs})
        egw_namespaces = sorted({e.kubernetes.envoy_gateway_namespace for e in envs})
        manifest(
            self,
            "project",
            api_version=ARGO_API,
            kind="AppProject",
            name=PROJECT,
            wave=Wave.CRDS,
            **common,
            body={
                "spec": {
                    "description": "The inference gateway: Envoy Gateway, picker, model servers.",
                    "sourceRepos": [repo, ENVOY_GATEWAY_CHART],
                    "destinations": [
                        {"server": "*", "namespace": ns} for ns in [*namespaces, *egw_namespaces]
                    ],
                    "clusterResourceWhitelist": [
                        {"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"},
                        {"group": "gateway.networking.k8s.io", "kind": "GatewayClass"},
                        {"group": "", "kind": "Namespace"},
                        {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"},
                        {"group": "rbac.authorization.k8s.io", "kind": "ClusterRoleBinding"},
                        {
                            "group": "admissionregistration.k8s.io",
                            "kind": "MutatingWebhookConfiguration",
                        },
                        {
                            "group": "admissionregistration.k8s.io",
                            "kind": "ValidatingWebhookConfiguration",
                        },
                    ],
                }
            },
        )
        manifest(
            self,
            "envoy-gateway",
            api_version=ARGO_API,
            kind="Application",
            name="envoy-gateway",
            wave=Wave.CONTROLLERS,
            **common,
            body={"spec": _envoy_gateway(destination_namespace=egw_namespaces[0], sync=sync)},
        )
        manifest(
            self,
            "environments",
            api_version=ARGO_API,
            kind="ApplicationSet",
            name=f"{PROJECT}-environments",
            wave=Wave.CONFIG,
            **common,
            body={"spec": _environments(repo=repo, revision=revision, sync=sync)},
        )


class RootChart(Chart):
    """The app-of-apps over `gitops/bootstrap/` (not recursive, so not this folder).

    The CDK app applies its own copy when it installs ArgoCD
    (`stacks/parts/argocd.py`); this file is for a cluster bootstrapped by hand:
    `kubectl apply -f gitops/bootstrap/root/root.k8s.yaml`.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, envs: Sequence[EnvironmentSpec]
    ) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        repo, revision = repo_of(envs)
        manifest(
            self,
            "root",
            api_version=ARGO_API,
            kind="Application",
            name="root",
            namespace=ARGOCD_NAMESPACE,
            labels=labels(name=PROJECT, component="gitops"),
            wave=Wave.NAMESPACE,
            body={
                "spec": {
                    "project": "default",
                    "source": {
                        "repoURL": repo,
                        "targetRevision": revision,
                        "path": "gitops/bootstrap",
                    },
                    "destination": {
                        "server": "https://kubernetes.default.svc",
                        "namespace": ARGOCD_NAMESPACE,
                    },
                    "syncPolicy": {
                        "automated": _AUTOMATED,
                        "retry": _RETRY,
                        "syncOptions": ["CreateNamespace=true"],
                    },
                }
            },
        )


def _envoy_gateway(*, destination_namespace: str, sync: dict[str, Any]) -> dict[str, Any]:
    values = (
        "config:\n"
        "  envoyGateway:\n"
        "    extensionApis:\n"
        "      # The ORIGINAL_DST cluster patch (EnvoyPatchPolicy) is off by default.\n"
        "      enableEnvoyPatchPolicy: true\n"
    )
    return {
        "project": PROJECT,
        "source": {
            "repoURL": ENVOY_GATEWAY_CHART,
            "chart": "gateway-helm",
            "targetRevision": ENVOY_GATEWAY_VERSION,
            "helm": {"values": values},
        },
        "destination": {
            "server": "https://kubernetes.default.svc",
            "namespace": destination_namespace,
        },
        "syncPolicy": {
            **sync,
            # The Gateway API and Envoy Gateway CRDs are too large for client-side apply.
            "syncOptions": ["CreateNamespace=true", "ServerSideApply=true"],
        },
    }


def _environments(*, repo: str, revision: str, sync: dict[str, Any]) -> dict[str, Any]:
    """One Application per environment folder and cluster of that environment.

    The matrix pairs each `gitops/environments/<env>/` with the ArgoCD clusters labelled
    `igw.dev/environment: <env>` (the cluster Secret that registers a cluster carries the
    label; for the local cluster see docs/operations.md), so an ArgoCD per cluster, as
    the CDK app installs, deploys only its own environment, and a central ArgoCD deploys
    each environment to its clusters.
    """
    return {
        "goTemplate": True,
        "goTemplateOptions": ["missingkey=error"],
        "generators": [
            {
                "matrix": {
                    "generators": [
                        # Directories, not the files: a file's keys (`name`) would collide
                        # with the clusters generator's parameters.
                        {
                            "git": {
                                "repoURL": repo,
                                "revision": revision,
                                "directories": [{"path": "gitops/environments/*"}],
                            }
                        },
                        {
                            "clusters": {
                                "selector": {"matchLabels": {ENV_LABEL: "{{.path.basename}}"}}
                            }
                        },
                    ]
                }
            }
        ],
        "template": {
            "metadata": {
                "name": f"{PROJECT}-{{{{.path.basename}}}}-{{{{.nameNormalized}}}}",
                "labels": {ENV_LABEL: "{{.path.basename}}"},
            },
            "spec": {
                "project": PROJECT,
                "source": {
                    "repoURL": repo,
                    "targetRevision": revision,
                    "path": "{{.path.path}}/rendered",
                },
                "destination": {"server": "{{.server}}"},
                # Deployments scaled by an HPA leave `replicas` out, so there is no diff
                # to ignore; PruneLast deletes only after the new objects are healthy.
                "syncPolicy": {**sync, "syncOptions": ["PruneLast=true"]},
            },
        },
    }
