"""The ArgoCD objects both sides apply, as plain dicts (no aws_cdk, no cdk8s imports).

The CDK app applies the root Application when it installs ArgoCD (`argocd.py`); the
cdk8s synth renders the same object into `gitops/bootstrap/root/` for a cluster
bootstrapped by hand. One function, so the two cannot drift.

`APPLICATION_HEALTH_LUA` is the health check ArgoCD needs for its own `Application`
kind: without one (ArgoCD removed the built-in check in v1.8, "Sync Waves" and
"Resource Health" docs), an app-of-apps marks a child Application healthy the moment it
exists, so a sync wave never waits for the CRDs a child installs.

Values only the CDK knows (a target group's ARN) reach the rendered tree through the
cluster Secret: the CDK annotates it, the ApplicationSet's clusters generator hands the
annotation to its template (argo-cd v2.13.2 `applicationset/generators/cluster.go`:
`metadata.annotations`), and the Application patches it in with Kustomize
(`source.kustomize.patches`, `target_group_arn_patch`). Nothing AWS generates is ever
committed to git.
"""

from __future__ import annotations

from typing import Any

from envspec.global_router import global_folder
from envspec.infra import GitOpsSpec

__all__ = [
    "APPLICATION_HEALTH_KEY",
    "APPLICATION_HEALTH_LUA",
    "ARGOCD_NAMESPACE",
    "CLUSTER_NAME_LABEL",
    "ENVIRONMENT_LABEL",
    "HYPERPOD_LABEL",
    "IN_CLUSTER",
    "OUT_OF_TREE_RETRY",
    "PATCHED_KUSTOMIZATION",
    "PROJECT",
    "REGION_LABEL",
    "SYNC_RETRY",
    "TARGET_GROUP_ARN_ANNOTATION",
    "cluster_secret",
    "global_application",
    "root_application",
    "target_group_arn_patch",
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
#: On the cluster Secret of a cluster that has a SageMaker HyperPod cluster attached: the
#: ApplicationSet `hyperpod-dependencies` (cdk8s/charts/bootstrap.py) installs HyperPod's
#: Helm chart there, before the CDK creates the HyperPod cluster.
HYPERPOD_LABEL = "igw.dev/hyperpod"
#: On the cluster Secret: the ARN of the region's Envoy target group (stacks/ingress.py),
#: which the workloads' Application patches into Envoy's TargetGroupBinding.
TARGET_GROUP_ARN_ANNOTATION = "igw.dev/envoy-target-group-arn"
#: The Kustomization file of a folder whose Application carries `kustomize.patches`: with
#: patches, Argo CD v2.13.2 reads exactly `<path>/kustomization.yaml` to append them
#: (`util/kustomize/kustomize.go: Build`, "failed to load kustomization.yaml" otherwise),
#: where plain Kustomize would accept `kustomization.yml` too.
PATCHED_KUSTOMIZATION = "kustomization.yaml"
#: The AppProject gitops/bootstrap declares (cdk8s/charts/bootstrap.py PROJECT).
PROJECT = "inference-gateway"
IN_CLUSTER = "https://kubernetes.default.svc"
SYNC_RETRY = {"limit": 5, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}}
#: For an Application the CDK creates outside the root's sync waves (the global router's):
#: nothing orders it after the add-ons whose kinds it uses and the namespace it deploys
#: into, so it retries until they exist. A negative limit retries without end (argo-cd
#: v2.13.2 `controller/appcontroller.go: processRequestedAppOperation`, `Retry.Limit < 0`;
#: docs/operator-manual/application.yaml "unlimited number of attempts if less than
#: 0"); the backoff is capped at 3 minutes, so it syncs within 3 minutes of the last
#: add-on turning up. With a bounded limit, a failed last retry leaves the commit unsynced
#: until the next one (autoSync skips a revision whose sync failed).
OUT_OF_TREE_RETRY = {"limit": -1, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "3m"}}

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


def cluster_secret(
    environment: str,
    region: str,
    cluster_name: str,
    *,
    target_group_arn: str,
    hyperpod: bool = False,
) -> dict[str, Any]:
    """ArgoCD's own cluster, declared: the Secret ArgoCD reads a cluster from, labelled
    with the environment so the ApplicationSet deploys this environment here, and with
    the region so it syncs that region's overlay, and with the EKS cluster's name for the
    add-ons that must know it (Karpenter); `igw.dev/hyperpod: enabled` where HyperPod
    joins this cluster (its Helm dependencies). Annotated with the ARN of the region's
    Envoy target group (an ARN is no label value: `:` and `/`)."""
    extra = {HYPERPOD_LABEL: "enabled"} if hyperpod else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "in-cluster",
            "namespace": ARGOCD_NAMESPACE,
            "annotations": {TARGET_GROUP_ARN_ANNOTATION: target_group_arn},
            "labels": {
                "argocd.argoproj.io/secret-type": "cluster",
                ENVIRONMENT_LABEL: environment,
                REGION_LABEL: region,
                CLUSTER_NAME_LABEL: cluster_name,
                **extra,
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


def target_group_arn_patch(binding: str, arn: str) -> dict[str, Any]:
    """A Kustomize patch (`source.kustomize.patches` of an Application) that names the
    target group of the TargetGroupBinding `binding` by ARN.

    By ARN, not `targetGroupName`: aws-load-balancer-controller v2.13 resolves a name to
    the ARN only when the binding is created (`webhooks/elbv2/targetgroupbinding_mutator
    .go`: `MutateCreate` calls `getArnFromNameIfNeeded`, `MutateUpdate` does not), and
    bindings by name are reported to stop re-registering pods on rollouts ("A target
    group ARN must be specified": aws-load-balancer-controller #4438, #4297)."""
    return {
        "target": {
            "group": "elbv2.k8s.aws",
            "version": "v1beta1",
            "kind": "TargetGroupBinding",
            "name": binding,
        },
        "patch": f"- op: add\n  path: /spec/targetGroupARN\n  value: {arn}\n",
    }


def global_application(
    *,
    environment: str,
    region: str,
    gitops: GitOpsSpec,
    namespace: str,
    binding: str,
    target_group_arn: str,
) -> dict[str, Any]:
    """The Application of one region's global-router folder, which the region's CDK fleet
    stack creates (stacks/global_tier.py): automated like the rest, the router's target
    group patched in by ARN.

    It is created beside the root Application, not in one of its waves, so nothing
    orders it after the add-ons: it creates its namespace if the environment's
    Application has not yet (`CreateNamespace=true`: gitops-engine `sync_context.go:
    autoCreateNamespace`, a PreSync task), and retries until the add-ons' kinds exist
    (`OUT_OF_TREE_RETRY`)."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": f"{PROJECT}-{environment}-global-router",
            "namespace": ARGOCD_NAMESPACE,
            "labels": {ENVIRONMENT_LABEL: environment},
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        },
        "spec": {
            "project": PROJECT,
            "source": {
                "repoURL": gitops.repo_url,
                "targetRevision": gitops.revision,
                "path": f"gitops/{global_folder(environment, region)}",
                "kustomize": {"patches": [target_group_arn_patch(binding, target_group_arn)]},
            },
            "destination": {"server": IN_CLUSTER, "namespace": namespace},
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "retry": OUT_OF_TREE_RETRY,
                "syncOptions": ["CreateNamespace=true"],
            },
        },
    }
