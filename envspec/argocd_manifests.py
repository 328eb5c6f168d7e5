"""The ArgoCD objects both sides apply, as plain dicts (no aws_cdk, no cdk8s imports).

The CDK app applies the root Application when it installs ArgoCD (`argocd.py`); the
cdk8s synth renders the same object into `gitops/bootstrap/root/` for a cluster
bootstrapped by hand. One function, so the two cannot drift.

`APPLICATION_HEALTH_LUA` is the health check ArgoCD needs for its own `Application`
kind: without one (ArgoCD removed the built-in check in v1.8, "Sync Waves" and
"Resource Health" docs), an app-of-apps marks a child Application healthy the moment it
exists, so a sync wave never waits for the CRDs a child installs.
"""

from __future__ import annotations

from typing import Any

from envspec.infra import GitOpsSpec

__all__ = [
    "APPLICATION_HEALTH_KEY",
    "APPLICATION_HEALTH_LUA",
    "ARGOCD_NAMESPACE",
    "CLUSTER_NAME_LABEL",
    "ENVIRONMENT_LABEL",
    "IN_CLUSTER",
    "REGION_LABEL",
    "cluster_secret",
    "root_application",
]

ARGOCD_NAMESPACE = "argocd"
#: The label the ApplicationSet's clusters generator selects on (cdk8s/charts/bootstrap.py).
ENVIRONMENT_LABEL = "igw.dev/environment"
#: The label whose value picks the region's overlay, `<env>/regions/<region>/`, so the
#: cluster pulls images from its own region's ECR (cdk8s/charts/app.py region_overlays).
REGION_LABEL = "igw.dev/region"
#: The EKS cluster's name, which the Karpenter ApplicationSet hands the controller
#: (`settings.clusterName`, and the interruption queue named after it).
CLUSTER_NAME_LABEL = "igw.dev/cluster-name"
IN_CLUSTER = "https://kubernetes.default.svc"
SYNC_RETRY = {"limit": 5, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}}

#: argocd-cm key of a custom health check: `resource.customizations.health.<group>_<kind>`.
APPLICATION_HEALTH_KEY = "resource.customizations.health.argoproj.io_Application"
#: A child Application is as healthy as its own status says; Progressing until it has one.
APPLICATION_HEALTH_LUA = """\
local result = {status = "Progressing", message = "waiting for the application's health"}
local health = obj.status ~= nil and obj.status.health or nil
if health ~= nil and health.status ~= nil then
  result.status = health.status
  result.message = health.message or ""
end
return result
"""


def cluster_secret(environment: str, region: str, cluster_name: str) -> dict[str, Any]:
    """ArgoCD's own cluster, declared: the Secret ArgoCD reads a cluster from, labelled
    with the environment so the ApplicationSet deploys this environment here, and with
    the region so it syncs that region's overlay, and with the EKS cluster's name for the
    add-ons that must know it (Karpenter)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "in-cluster",
            "namespace": ARGOCD_NAMESPACE,
            "labels": {
                "argocd.argoproj.io/secret-type": "cluster",
                ENVIRONMENT_LABEL: environment,
                REGION_LABEL: region,
                CLUSTER_NAME_LABEL: cluster_name,
            },
        },
        "stringData": {"name": "in-cluster", "server": IN_CLUSTER},
    }


def root_application(spec: GitOpsSpec) -> dict[str, Any]:
    """The app-of-apps; automated sync with prune and self-heal, as DESIGN.md §1 says."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": "root",
            "namespace": ARGOCD_NAMESPACE,
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        },
        "spec": {
            "project": "default",
            "source": {
                "repoURL": spec.repo_url,
                "targetRevision": spec.revision,
                "path": spec.path,
            },
            "destination": {"server": IN_CLUSTER, "namespace": ARGOCD_NAMESPACE},
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "retry": SYNC_RETRY,
                "syncOptions": ["CreateNamespace=true"],
            },
        },
    }
