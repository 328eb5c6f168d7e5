"""The EKS cluster of one region: control plane, access, system nodes, GPU nodes, add-ons.

The API endpoint is private (kubectl runs inside the VPC, through CDK's kubectl provider
for the Helm and manifest resources); secrets are encrypted with a customer key; all
control-plane logs go to CloudWatch. Access is by EKS access entries only (no aws-auth
ConfigMap). Managed node groups rather than Auto Mode: GPU generations need their own
AMI type, labels, taints and zone placement, which the environment file states.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aws_cdk import Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk.lambda_layer_kubectl_v32 import KubectlV32Layer
from constructs import Construct

from envspec.infra import ClusterSpec, NodeGroupSpec

from .addons import AddOn, CloudWatchObservabilityAddOn, default_addons, install_addons
from .cluster_nag import acknowledge_cluster, acknowledge_nodegroup
from .eks_ref import cluster_ref
from .gpu_nodes import GpuNodeGroup, GpuNodeGroupProps
from .karpenter import Karpenter, KarpenterProps
from .pod_identity import cloudwatch_agent_identity

__all__ = ["KUBECTL_LAYERS", "KUBECTL_WAIT_LIMIT", "InferenceCluster", "InferenceClusterProps"]

#: Kubernetes minor version -> the pinned kubectl/helm layer that talks to it.
KUBECTL_LAYERS: dict[str, Callable[[Construct, str], object]] = {"1.32": KubectlV32Layer}
#: The longest a Helm install or an object read may wait through CDK's kubectl provider.
#: The wait runs inside the provider's Lambda (`helm upgrade --wait --timeout`, the
#: `wait_for_output` loop of `KubernetesObjectValue`), whose timeout is 15 minutes
#: (aws-cdk-lib 2.275.0 `aws-eks-v2/lib/kubectl-provider.js`, `Duration.minutes(15)`;
#: `custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/get/__init__.py`). A longer
#: wait is cut off by Lambda mid-loop, and the stack fails with "Task timed out" instead
#: of the wait's own message; two minutes are kept for `aws eks update-kubeconfig`, a cold
#: start and the last kubectl call.
KUBECTL_WAIT_LIMIT = Duration.minutes(13)

_LOGGING = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


@dataclass(frozen=True)
class InferenceClusterProps:
    spec: ClusterSpec
    node_groups: tuple[NodeGroupSpec, ...]
    node_group_zones: dict[str, tuple[str, ...]]
    #: The region's ECR caches Docker Hub (model-server images): GPU nodes fill it.
    pull_through_cache: bool = False
    #: Karpenter's AWS half (GPU NodePools come from git); None: managed node groups only.
    karpenter: KarpenterProps | None = None
    addons: tuple[AddOn, ...] = field(default_factory=lambda: tuple(default_addons()))


class InferenceCluster(Construct):
    """EKS (aws_eks_v2) with access entries, a system node group, GPU node groups, add-ons."""

    def __init__(
        self, scope: Construct, construct_id: str, vpc: ec2.IVpc, props: InferenceClusterProps
    ) -> None:
        super().__init__(scope, construct_id)
        spec = props.spec
        layer = KUBECTL_LAYERS.get(spec.kubernetes_version)
        if layer is None:
            raise ValueError(
                f"cluster.kubernetes_version: no kubectl layer is pinned for "
                f"{spec.kubernetes_version} (pinned: {sorted(KUBECTL_LAYERS)})"
            )
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"Envelope encryption of Kubernetes secrets in {spec.name}",
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=spec.name,
            version=eks.KubernetesVersion.of(spec.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            endpoint_access=eks.EndpointAccess.PRIVATE,
            cluster_logging=_LOGGING,
            secrets_encryption_key=self.secrets_key,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # Envoy's pods are registered in the ingress target group by a
            # TargetGroupBinding, which the AWS Load Balancer Controller reconciles.
            alb_controller=eks.AlbControllerOptions(version=eks.AlbControllerVersion.V2_13_3),
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=layer(self, "KubectlLayer"),  # type: ignore[arg-type]
            ),
        )
        for i, arn in enumerate(spec.admin_role_arns):
            self.cluster.grant_access(
                f"Admin{i}",
                arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy",
                        access_scope_type=eks.AccessScopeType.CLUSTER,
                    )
                ],
            )
        system = spec.system_node_group
        self.system_nodes = self.cluster.add_nodegroup_capacity(
            "SystemNodes",
            nodegroup_name=f"{spec.name}-system",
            instance_types=[ec2.InstanceType(system.instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=system.min_size,
            max_size=system.max_size,
            desired_size=system.desired_size,
            labels={"igw.dev/role": "system"},
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            enable_node_auto_repair=True,
        )
        self.gpu_node_groups: dict[str, GpuNodeGroup] = {}
        for group in props.node_groups:
            self.gpu_node_groups[group.name] = GpuNodeGroup(
                self,
                f"Gpu-{group.name}",
                self.cluster,
                GpuNodeGroupProps(
                    spec=group,
                    cluster_name=spec.name,
                    zones=props.node_group_zones[group.name],
                    pull_through_cache=props.pull_through_cache,
                ),
            )
        acknowledge_cluster(self.cluster)
        acknowledge_nodegroup(self.system_nodes)
        self.addons = install_addons(
            self, cluster_ref(self.cluster), props.addons, after=[self.system_nodes]
        )
        agent = self.addons.get(CloudWatchObservabilityAddOn)
        if agent is not None:
            # The agent reads its credentials when it starts: its Pod Identity association
            # must exist before the add-on does, or it runs without a role until restarted.
            self.cloudwatch_agent_role, self.cloudwatch_agent_association = (
                cloudwatch_agent_identity(self, spec.name)
            )
            self.cloudwatch_agent_association.node.add_dependency(self.cluster)
            agent.node.add_dependency(self.cloudwatch_agent_association)
        self.karpenter: Karpenter | None = None
        if props.karpenter is not None:
            self.karpenter = Karpenter(self, "Karpenter", self.cluster, vpc, props.karpenter)
