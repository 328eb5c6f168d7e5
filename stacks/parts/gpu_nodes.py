"""GPU managed node groups, one per GPU generation, placed only where capacity is expected.

Each group runs the AL2023 NVIDIA AMI (driver and container toolkit included), carries the
labels the model-server Deployments select on (`igw.dev/gpu`, `nvidia.com/gpu.product`),
and the `nvidia.com/gpu=true:NoSchedule` taint so nothing but GPU workloads lands on it.
Its subnets are the private subnets of the zones the environment lists for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from envspec.infra import NodeGroupSpec
from envspec.names import GPU_PRODUCTS, GPU_TAINT_KEY, gpu_labels

from ..nag import acknowledge
from .cluster_nag import acknowledge_nodegroup
from .eks_ref import cluster_ref
from .images import pull_through_statement
from .pod_identity import wildcard_findings

__all__ = ["GPU_PRODUCTS", "GPU_TAINT", "GpuNodeGroup", "GpuNodeGroupProps", "gpu_labels"]

GPU_TAINT = eks.TaintSpec(key=GPU_TAINT_KEY, value="true", effect=eks.TaintEffect.NO_SCHEDULE)

_CAPACITY = {
    "ON_DEMAND": eks.CapacityType.ON_DEMAND,
    "SPOT": eks.CapacityType.SPOT,
    "CAPACITY_BLOCK": eks.CapacityType.CAPACITY_BLOCK,
}


@dataclass(frozen=True)
class GpuNodeGroupProps:
    spec: NodeGroupSpec
    cluster_name: str
    zones: tuple[str, ...]
    #: The region's ECR caches Docker Hub: the nodes fill it on a first pull.
    pull_through_cache: bool = False


class GpuNodeGroup(Construct):
    """One GPU generation's managed node group."""

    def __init__(
        self, scope: Construct, construct_id: str, cluster: eks.Cluster, props: GpuNodeGroupProps
    ) -> None:
        super().__init__(scope, construct_id)
        spec = props.spec
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster_ref(cluster),
            nodegroup_name=f"{props.cluster_name}-{spec.name}",
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=_CAPACITY[spec.capacity_type],
            min_size=spec.min_size,
            max_size=spec.max_size,
            desired_size=spec.desired_size,
            disk_size=spec.disk_size_gib,
            labels=gpu_labels(spec),
            taints=[GPU_TAINT],
            subnets=ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                availability_zones=list(props.zones),
            ),
            enable_node_auto_repair=True,
            # A GPU node holds live streams; replace one at a time.
            max_unavailable=1,
            tags={"igw.dev/gpu": spec.gpu, "igw.dev/node-group": spec.name},
        )
        # aws-cdk-lib's table of GPU instance families stops at p3/g4, so it rejects the
        # NVIDIA AMI for p5 and g5; set the instance type on the resource directly.
        cfn = self.nodegroup.node.default_child
        cfn.add_property_override("InstanceTypes", [spec.instance_type])  # type: ignore[union-attr]
        acknowledge_nodegroup(self.nodegroup)
        if props.pull_through_cache:
            policy = iam.Policy(self, "PullThroughCache", statements=[pull_through_statement(self)])
            policy.attach_to_role(self.nodegroup.role)
            acknowledge(
                policy,
                "IAM5",
                "A pull-through cache creates one repository per upstream image on its first "
                "pull; the nodes may do that only under the docker-hub/ prefix of this "
                "region's registry.",
                findings=wildcard_findings(policy),
            )
