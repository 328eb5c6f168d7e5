"""What Karpenter needs from AWS: its controller's role, the interruption queue, the node
role and the nodes' access to the cluster.

Karpenter itself (the upstream chart) and its NodePools / EC2NodeClasses come from git
(cdk8s/charts/bootstrap.py, cdk8s/charts/node_pools.py); this is the AWS half, per region:

* the controller's role, through Pod Identity (`kube-system/karpenter`): launch, tag and
  terminate only instances and launch templates tagged as this cluster's and a NodePool's,
  pass only the node role to EC2, manage only instance profiles tagged as this cluster's
  in this region, read the interruption queue, describe this region's EC2 offerings;
* the interruption queue and the EventBridge rules that feed it (Spot interruption,
  rebalance recommendation, instance state change, AWS Health scheduled changes), so
  Karpenter drains a GPU node before EC2 takes it away;
* an access entry of type EC2_LINUX for the node role, so the nodes join the cluster;
* the `karpenter.sh/discovery` tag on the private subnets the EC2NodeClasses select.

The node role is one per cluster name (IAM is global): the primary region creates it, the
other regions grant it access by name (the secondary cluster stacks deploy after the
primary one). Its policies are those Karpenter's getting-started template gives nodes,
plus filling the Docker Hub pull-through cache where there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from envspec.names import (
    KARPENTER_DISCOVERY_TAG,
    KARPENTER_NAMESPACE,
    KARPENTER_SERVICE_ACCOUNT,
    karpenter_node_role_name,
    karpenter_queue_name,
)

from ..nag import acknowledge
from .eks_ref import cluster_ref
from .images import DOCKER_HUB_CACHE_PREFIX
from .pod_identity import Workload, pod_identity, wildcard_findings

__all__ = ["INTERRUPTION_EVENTS", "KARPENTER", "Karpenter", "KarpenterProps"]

KARPENTER = Workload("karpenter", KARPENTER_NAMESPACE, KARPENTER_SERVICE_ACCOUNT)
#: (rule id, event source, detail type): what Karpenter reads from its queue (Karpenter
#: docs, "Interruption": Spot interruption warnings, rebalance recommendations, scheduled
#: change health events, instance state changes).
INTERRUPTION_EVENTS = (
    ("ScheduledChange", "aws.health", "AWS Health Event"),
    ("SpotInterruption", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("Rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("InstanceStateChange", "aws.ec2", "EC2 Instance State-change Notification"),
)
_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy/"
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
)


@dataclass(frozen=True)
class KarpenterProps:
    cluster_name: str
    #: Create the node role here (the primary region); elsewhere it is granted by name.
    create_node_role: bool
    #: Regions whose Docker Hub cache the nodes may fill (empty: no cache).
    pull_through_regions: tuple[str, ...] = ()


class Karpenter(Construct):
    """The AWS half of Karpenter for one region's cluster."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        cluster: eks.Cluster,
        vpc: ec2.IVpc,
        props: KarpenterProps,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        name = props.cluster_name
        self.queue = sqs.Queue(
            self,
            "InterruptionQueue",
            queue_name=karpenter_queue_name(name),
            # An interruption older than the two-minute Spot notice is of no use.
            retention_period=Duration.minutes(5),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        acknowledge(
            self.queue,
            "SQS3",
            "Interruption notices are worth nothing after a few minutes (retention is five): "
            "a dead-letter queue would only keep stale notices Karpenter must never act on.",
        )
        self.rules = [
            events.Rule(
                self,
                rule_id,
                description=f"{detail} -> Karpenter of {name}",
                event_pattern=events.EventPattern(source=[source], detail_type=[detail]),
                targets=[targets.SqsQueue(self.queue)],
            )
            for rule_id, source, detail in INTERRUPTION_EVENTS
        ]
        role_name = karpenter_node_role_name(name)
        self.node_role_arn = stack.format_arn(
            service="iam", region="", resource="role", resource_name=role_name
        )
        self.node_role: iam.Role | None = None
        if props.create_node_role:
            self.node_role = self._node_role(role_name, props)
        self.access_entry = eks.AccessEntry(
            self,
            "NodeAccess",
            cluster=cluster_ref(cluster),
            principal=self.node_role_arn,
            access_entry_type=eks.AccessEntryType.EC2_LINUX,
            access_policies=[],
        )
        if self.node_role is not None:
            self.access_entry.node.add_dependency(self.node_role)
        self.controller_role, self.association = pod_identity(
            self,
            cluster_name=name,
            workload=KARPENTER,
            statements=controller_statements(
                stack, cluster_name=name, queue=self.queue, node_role_arn=self.node_role_arn
            ),
            reason="Karpenter launches instances whose ids are unknown in advance: every "
            "wildcard is this region's EC2 resources of a type, narrowed by the cluster's "
            "and a NodePool's tags in conditions; instance profiles are narrowed by tags; "
            "Describe* and pricing:GetProducts have no resource types (Karpenter's "
            "published controller policy).",
        )
        self.association.node.add_dependency(cluster)
        for subnet in vpc.private_subnets:
            Tags.of(subnet).add(KARPENTER_DISCOVERY_TAG, name)

    def _node_role(self, role_name: str, props: KarpenterProps) -> iam.Role:
        role = iam.Role(
            self,
            "NodeRole",
            role_name=role_name,
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Nodes Karpenter launches for {props.cluster_name}",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_POLICIES
            ],
        )
        acknowledge(
            role,
            "IAM4",
            "EKS nodes need exactly these AWS managed policies (kubelet registration, VPC "
            "CNI, image pulls, SSM for node access without SSH), as Karpenter's "
            "getting-started template gives its node role.",
            findings=[f"{_MANAGED}{p}" for p in NODE_POLICIES],
        )
        if props.pull_through_regions:
            stack = Stack.of(self)
            policy = iam.Policy(
                self,
                "PullThroughCache",
                statements=[
                    iam.PolicyStatement(
                        actions=["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
                        resources=[
                            f"arn:{stack.partition}:ecr:{region}:{stack.account}:repository/"
                            f"{DOCKER_HUB_CACHE_PREFIX}/*"
                            for region in props.pull_through_regions
                        ],
                    )
                ],
            )
            policy.attach_to_role(role)
            acknowledge(
                policy,
                "IAM5",
                "A pull-through cache creates one repository per upstream image on its "
                "first pull; the nodes may do that only under the docker-hub/ prefix.",
                findings=wildcard_findings(policy),
            )
        return role


def controller_statements(
    stack: Stack, *, cluster_name: str, queue: sqs.IQueue, node_role_arn: str
) -> list[iam.PolicyStatement]:
    """The controller's permissions (Karpenter 1.6, "Getting Started" CloudFormation
    template, `KarpenterControllerPolicy`), written for one region and one cluster."""
    p, region, account = stack.partition, stack.region, stack.account
    ec2_arn = f"arn:{p}:ec2:{region}"
    owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    request_owned = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    created = [
        f"{ec2_arn}:*:{kind}/*"
        for kind in (
            "fleet",
            "instance",
            "volume",
            "network-interface",
            "launch-template",
            "spot-instances-request",
        )
    ]
    profiles = f"arn:{p}:iam::{account}:instance-profile/*"
    region_tag = "topology.kubernetes.io/region"
    return [
        iam.PolicyStatement(
            sid="LaunchFromSharedResources",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[
                f"{ec2_arn}::image/*",
                f"{ec2_arn}::snapshot/*",
                f"{ec2_arn}:*:security-group/*",
                f"{ec2_arn}:*:subnet/*",
                f"{ec2_arn}:*:capacity-reservation/*",
            ],
        ),
        iam.PolicyStatement(
            sid="LaunchFromOwnLaunchTemplates",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[f"{ec2_arn}:*:launch-template/*"],
            conditions={
                "StringEquals": owned,
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="CreateOnlyTagged",
            actions=["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            resources=[*created, f"{ec2_arn}:*:capacity-reservation/*"],
            conditions={
                "StringEquals": request_owned,
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="TagOnCreate",
            actions=["ec2:CreateTags"],
            resources=created,
            conditions={
                "StringEquals": {
                    **request_owned,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="TagOwnInstances",
            actions=["ec2:CreateTags"],
            resources=[f"{ec2_arn}:*:instance/*"],
            conditions={
                "StringEquals": owned,
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        ),
        iam.PolicyStatement(
            sid="DeleteOnlyOwn",
            actions=["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            resources=[f"{ec2_arn}:*:instance/*", f"{ec2_arn}:*:launch-template/*"],
            conditions={
                "StringEquals": owned,
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="DescribeThisRegion",
            actions=[
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": region}},
        ),
        iam.PolicyStatement(
            sid="ReadPublicAmiParameters",
            actions=["ssm:GetParameter"],
            resources=[f"arn:{p}:ssm:{region}::parameter/aws/service/*"],
        ),
        iam.PolicyStatement(sid="ReadPrices", actions=["pricing:GetProducts"], resources=["*"]),
        iam.PolicyStatement(
            sid="ReadInterruptions",
            actions=["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            resources=[queue.queue_arn],
        ),
        iam.PolicyStatement(
            sid="PassOnlyTheNodeRole",
            actions=["iam:PassRole"],
            resources=[node_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        iam.PolicyStatement(
            sid="CreateOwnInstanceProfiles",
            actions=["iam:CreateInstanceProfile"],
            resources=[profiles],
            conditions={
                "StringEquals": {**request_owned, f"aws:RequestTag/{region_tag}": region},
                "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="TagOwnInstanceProfiles",
            actions=["iam:TagInstanceProfile"],
            resources=[profiles],
            conditions={
                "StringEquals": {
                    **owned,
                    f"aws:ResourceTag/{region_tag}": region,
                    **request_owned,
                    f"aws:RequestTag/{region_tag}": region,
                },
                "StringLike": {
                    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                },
            },
        ),
        iam.PolicyStatement(
            sid="ManageOwnInstanceProfiles",
            actions=[
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            resources=[profiles],
            conditions={
                "StringEquals": {**owned, f"aws:ResourceTag/{region_tag}": region},
                "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="ReadInstanceProfiles", actions=["iam:GetInstanceProfile"], resources=[profiles]
        ),
        iam.PolicyStatement(
            sid="DiscoverApiServer",
            actions=["eks:DescribeCluster"],
            resources=[
                stack.format_arn(service="eks", resource="cluster", resource_name=cluster_name)
            ],
        ),
    ]
