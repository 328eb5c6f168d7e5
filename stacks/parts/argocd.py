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

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from envspec.argocd_manifests import (
    APPLICATION_HEALTH_KEY,
    APPLICATION_HEALTH_LUA,
    ARGOCD_NAMESPACE,
    ENVIRONMENT_LABEL,
    IN_CLUSTER,
    cluster_secret,
    root_application,
)
from envspec.infra import GitOpsSpec

from .eks_cluster import KUBECTL_WAIT_LIMIT

__all__ = [
    "ARGOCD_NAMESPACE",
    "ENVIRONMENT_LABEL",
    "IN_CLUSTER",
    "ArgoCdBootstrap",
    "ArgoCdProps",
    "cluster_secret",
    "root_application",
]

ARGOCD_REPOSITORY = "https://argoproj.github.io/argo-helm"


@dataclass(frozen=True)
class ArgoCdProps:
    spec: GitOpsSpec
    environment: str
    region: str
    cluster_name: str
    #: The region's Envoy target group (stacks/ingress.py), annotated on the cluster Secret:
    #: the workloads' Application patches it into Envoy's TargetGroupBinding.
    target_group_arn: str
    #: SageMaker HyperPod joins this cluster: the Secret says so (`igw.dev/hyperpod`),
    #: and Argo CD installs HyperPod's Helm chart here.
    hyperpod: bool = False


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
            timeout=KUBECTL_WAIT_LIMIT,
            values={
                "global": {"nodeSelector": {"igw.dev/role": "system"}},
                # Private cluster: the UI is reached with kubectl port-forward only.
                "server": {"service": {"type": "ClusterIP"}},
                "configs": {
                    "params": {"server.insecure": False},
                    # Sync waves wait for child Applications only with this check.
                    "cm": {APPLICATION_HEALTH_KEY: APPLICATION_HEALTH_LUA},
                },
            },
        )
        # Before the root Application: its first sync already finds the labelled cluster.
        self.cluster_secret = eks.KubernetesManifest(
            self,
            "InClusterSecret",
            cluster=cluster,
            manifest=[
                cluster_secret(
                    props.environment,
                    props.region,
                    props.cluster_name,
                    target_group_arn=props.target_group_arn,
                    hyperpod=props.hyperpod,
                )
            ],
            overwrite=True,
        )
        self.cluster_secret.node.add_dependency(self.chart)
        self.root = eks.KubernetesManifest(
            self,
            "RootApplication",
            cluster=cluster,
            manifest=[root_application(props.spec)],
            overwrite=True,
        )
        self.root.node.add_dependency(self.chart, self.cluster_secret)
