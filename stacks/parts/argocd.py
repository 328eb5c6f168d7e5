"""ArgoCD from its Helm chart, the in-cluster cluster Secret, and the root Application
that points it at `gitops/`.

After this, every Kubernetes change is a pull request: the root Application syncs
`gitops/bootstrap`, whose ApplicationSet (cdk8s side) fans out over the environments'
rendered manifests to the ArgoCD clusters labelled `igw.dev/environment: <env>`. The
local cluster is registered by `cluster_secret` with exactly that label; without it the
ApplicationSet generates nothing. The chart version is pinned in the environment file.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ..spec_infra import GitOpsSpec

__all__ = [
    "ARGOCD_NAMESPACE",
    "ENVIRONMENT_LABEL",
    "IN_CLUSTER",
    "ArgoCdBootstrap",
    "ArgoCdProps",
    "cluster_secret",
    "root_application",
]

ARGOCD_NAMESPACE = "argocd"
ARGOCD_REPOSITORY = "https://argoproj.github.io/argo-helm"
#: The label the ApplicationSet's clusters generator selects on (cdk8s/charts/bootstrap.py).
ENVIRONMENT_LABEL = "igw.dev/environment"
IN_CLUSTER = "https://kubernetes.default.svc"


@dataclass(frozen=True)
class ArgoCdProps:
    spec: GitOpsSpec
    environment: str


def cluster_secret(environment: str) -> dict[str, object]:
    """ArgoCD's own cluster, declared: the Secret ArgoCD reads a cluster from, labelled
    with the environment so the ApplicationSet deploys this environment here."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "in-cluster",
            "namespace": ARGOCD_NAMESPACE,
            "labels": {
                "argocd.argoproj.io/secret-type": "cluster",
                ENVIRONMENT_LABEL: environment,
            },
        },
        "stringData": {"name": "in-cluster", "server": IN_CLUSTER},
    }


def root_application(spec: GitOpsSpec, environment: str) -> dict[str, object]:
    """The app-of-apps; automated sync with prune and self-heal, as DESIGN.md §1 says."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": "root",
            "namespace": ARGOCD_NAMESPACE,
            "labels": {ENVIRONMENT_LABEL: environment},
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
                "server": IN_CLUSTER,
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
        # Before the root Application: its first sync already finds the labelled cluster.
        self.cluster_secret = eks.KubernetesManifest(
            self,
            "InClusterSecret",
            cluster=cluster,
            manifest=[cluster_secret(props.environment)],
            overwrite=True,
        )
        self.cluster_secret.node.add_dependency(self.chart)
        self.root = eks.KubernetesManifest(
            self,
            "RootApplication",
            cluster=cluster,
            manifest=[root_application(props.spec, props.environment)],
            overwrite=True,
        )
        self.root.node.add_dependency(self.chart, self.cluster_secret)
