"""ArgoCD from its Helm chart, and the root Application that points it at `gitops/`.

After this, every Kubernetes change is a pull request: the root Application syncs
`gitops/bootstrap`, whose ApplicationSet (cdk8s side) fans out over the environments'
rendered manifests. The chart version is pinned in the environment file.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ..spec_infra import GitOpsSpec

__all__ = ["ARGOCD_NAMESPACE", "ArgoCdBootstrap", "ArgoCdProps", "root_application"]

ARGOCD_NAMESPACE = "argocd"
ARGOCD_REPOSITORY = "https://argoproj.github.io/argo-helm"


@dataclass(frozen=True)
class ArgoCdProps:
    spec: GitOpsSpec
    environment: str


def root_application(spec: GitOpsSpec, environment: str) -> dict[str, object]:
    """The app-of-apps; automated sync with prune and self-heal, as DESIGN.md §1 says."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": "root",
            "namespace": ARGOCD_NAMESPACE,
            "labels": {"igw.dev/environment": environment},
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        },
        "spec": {
            "project": "default",
            "source": {
                "repoURL": spec.repo_url,
                "targetRevision": spec.revision,
                "path": spec.path,
            },
            "destination": {
                "server": "https://kubernetes.default.svc",
                "namespace": ARGOCD_NAMESPACE,
            },
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": ["CreateNamespace=true"],
            },
        },
    }


class ArgoCdBootstrap(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, cluster: eks.ICluster, props: ArgoCdProps
    ) -> None:
        super().__init__(scope, construct_id)
        self.chart = eks.HelmChart(
            self,
            "ArgoCd",
            cluster=cluster,
            chart="argo-cd",
            repository=ARGOCD_REPOSITORY,
            version=props.spec.argocd_chart_version,
            namespace=ARGOCD_NAMESPACE,
            release="argocd",
            create_namespace=True,
            wait=True,
            timeout=Duration.minutes(15),
            values={
                "global": {"nodeSelector": {"igw.dev/role": "system"}},
                # Private cluster: the UI is reached with kubectl port-forward only.
                "server": {"service": {"type": "ClusterIP"}},
                "configs": {"params": {"server.insecure": False}},
            },
        )
        self.root = eks.KubernetesManifest(
            self,
            "RootApplication",
            cluster=cluster,
            manifest=[root_application(props.spec, props.environment)],
            overwrite=True,
        )
        self.root.node.add_dependency(self.chart)
