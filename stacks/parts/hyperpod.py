"""A SageMaker HyperPod cluster whose orchestrator is the EKS cluster.

HyperPod brings resilient GPU nodes (deep health checks, automatic node replacement) into
the same EKS cluster as the managed node groups, so the picker routes to HyperPod pods
exactly as to any other pod of a pool. The lifecycle script is shipped from
`stacks/assets/hyperpod/` to a private bucket; the instance groups run in the private
subnets of the zones the environment lists and share the cluster security group.

What AWS requires of an EKS-orchestrated cluster, and where it is done:

* the execution role (SageMaker AI developer guide, "IAM role for SageMaker HyperPod",
  the statements for Amazon EKS orchestration): `AmazonSageMakerClusterInstanceRolePolicy`
  plus the ENI actions the Amazon VPC CNI runs on HyperPod nodes, ECR image pulls, and
  `eks-auth:AssumeRoleForPodIdentity` for the Pod Identity agent (`EKS_NODE_STATEMENTS`);
  HyperPod creates the cluster's access entries for it itself (API reference,
  `ClusterMetadata.EksRoleAccessEntries`: "created by HyperPod on your behalf");
* HyperPod's Helm chart installed before `CreateCluster` ("Installing packages on the
  Amazon EKS cluster using Helm": required, else creation may fail): Argo CD installs it
  (the `hyperpod-dependencies` ApplicationSet of gitops/bootstrap, for a cluster Secret
  labelled `igw.dev/hyperpod: enabled`), and the cluster waits for the chart's
  health-monitoring agent DaemonSet (`DEPENDENCIES_READY`) before it is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IConstruct

from envspec.infra import HyperPodSpec

from ..nag import acknowledge
from .eks_cluster import KUBECTL_WAIT_LIMIT
from .images import pull_through_statement

__all__ = [
    "DEPENDENCIES_READY",
    "EKS_NODE_STATEMENTS",
    "LIFECYCLE_DIR",
    "HyperPodCluster",
    "HyperPodProps",
]

LIFECYCLE_DIR = Path(__file__).resolve().parent.parent / "assets" / "hyperpod"
_PREFIX = "lifecycle"
#: The object whose existence says HyperPod's Helm chart is installed: the health-
#: monitoring agent DaemonSet, in the namespace the chart fixes ("The aws-hyperpod
#: namespace name cannot be modified"; aws/sagemaker-hyperpod-cli
#: helm_chart/HyperPodHelmChart/charts/health-monitoring-agent).
DEPENDENCIES_READY = ("daemonset", "health-monitoring-agent", "aws-hyperpod")
#: How long the HyperPod cluster waits for Argo CD to install the chart (wave 0 of the
#: root Application: after the CRDs and cert-manager of wave -1, then `helm dependency
#: build` of the chart): a few minutes, within the kubectl provider's limit.
DEPENDENCIES_TIMEOUT = KUBECTL_WAIT_LIMIT
#: The execution role's statements for EKS orchestration (AWS's list): the VPC CNI's ENI
#: work on the node, image pulls, and the Pod Identity agent's credential exchange.
EKS_NODE_STATEMENTS: dict[str, tuple[str, ...]] = {
    "VpcCni": (
        "ec2:AssignPrivateIpAddresses",
        "ec2:CreateNetworkInterface",
        "ec2:CreateNetworkInterfacePermission",
        "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeVpcs",
        "ec2:DescribeDhcpOptions",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "ec2:DetachNetworkInterface",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:UnassignPrivateIpAddresses",
    ),
    "ImagePulls": ("ecr:BatchGetImage", "ecr:GetAuthorizationToken", "ecr:GetDownloadUrlForLayer"),
}


@dataclass(frozen=True)
class HyperPodProps:
    spec: HyperPodSpec
    cluster_name: str
    zones: tuple[str, ...]
    access_logs: s3.IBucket
    #: The cluster's nodes may fill the Docker Hub pull-through cache (parts/images.py).
    pull_through_cache: bool = False


class HyperPodCluster(Construct):
    """`AWS::SageMaker::Cluster` with `Orchestrator.Eks.ClusterArn` = the EKS cluster."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        cluster: eks.ICluster,
        vpc: ec2.IVpc,
        props: HyperPodProps,
        *,
        argocd: Construct,
    ) -> None:
        """`argocd`: what installs Argo CD and its root Application; the wait for the
        chart starts after it."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.bucket = s3.Bucket(
            self,
            "Lifecycle",
            # HyperPod's managed policy reads lifecycle scripts only from buckets so named.
            bucket_name=f"sagemaker-{props.cluster_name}-lifecycle-{stack.account}-{stack.region}"[
                :63
            ],
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=props.access_logs,
            server_access_logs_prefix="hyperpod-lifecycle/",
            removal_policy=RemovalPolicy.RETAIN,
        )
        deployment = s3deploy.BucketDeployment(
            self,
            "LifecycleScripts",
            sources=[s3deploy.Source.asset(str(LIFECYCLE_DIR))],
            destination_bucket=self.bucket,
            destination_key_prefix=_PREFIX,
            memory_limit=256,
        )
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(
                    "AmazonSageMakerClusterInstanceRolePolicy"
                )
            ],
            description="HyperPod instance role: node bootstrap and health reporting.",
        )
        self.bucket.grant_read(self.role, f"{_PREFIX}/*")
        self._eks_node_permissions(stack, cluster, props)
        acknowledge(
            self.role,
            "IAM4",
            "AmazonSageMakerClusterInstanceRolePolicy is the policy AWS documents for "
            "HyperPod instance roles; HyperPod's agents change with the service, and the "
            "managed policy tracks them.",
            findings=[
                "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy"
            ],
        )
        bucket_arn = f"<{stack.resolve(self.bucket.node.default_child.logical_id)}.Arn>"  # type: ignore[union-attr]
        read = ["Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*"]
        acknowledge(
            self.role,
            "IAM5",
            "Read access (CDK's grant_read action groups) is limited to the lifecycle/ "
            "prefix of this cluster's own lifecycle bucket: the scripts HyperPod runs.",
            findings=[*read, f"Resource::{bucket_arn}/{_PREFIX}/*"],
        )
        for child in stack.node.children:
            if child.node.id.startswith("Custom::CDKBucketDeployment"):
                _acknowledge_deployment_handler(child, stack, bucket_arn, read)
        subnets = vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=list(props.zones)
        )
        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=f"{props.cluster_name}-hyperpod",
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(
                    cluster_arn=cluster.cluster_arn
                )
            ),
            node_recovery=props.spec.node_recovery,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[cluster.cluster_security_group_id],
                subnets=subnets.subnet_ids,
            ),
            instance_groups=[
                sagemaker.CfnCluster.ClusterInstanceGroupProperty(
                    instance_group_name=group.name,
                    instance_type=group.instance_type,
                    instance_count=group.instance_count,
                    threads_per_core=group.threads_per_core,
                    execution_role=self.role.role_arn,
                    life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                        source_s3_uri=self.bucket.s3_url_for_object(_PREFIX),
                        on_create="on_create.sh",
                    ),
                    on_start_deep_health_checks=["InstanceStress", "InstanceConnectivity"],
                )
                for group in props.spec.instance_groups
            ],
        )
        self.cluster.node.add_dependency(deployment)
        kind, name, namespace = DEPENDENCIES_READY
        self.dependencies = eks.KubernetesObjectValue(
            self,
            "HelmDependencies",
            cluster=cluster,
            object_type=kind,
            object_name=name,
            object_namespace=namespace,
            json_path=".metadata.name",
            timeout=DEPENDENCIES_TIMEOUT,
        )
        self.dependencies.node.add_dependency(argocd)
        self.cluster.node.add_dependency(self.dependencies)

    def _eks_node_permissions(
        self, stack: Stack, cluster: eks.ICluster, props: HyperPodProps
    ) -> None:
        for sid, actions in EKS_NODE_STATEMENTS.items():
            self.role.add_to_policy(
                iam.PolicyStatement(sid=sid, actions=list(actions), resources=["*"])
            )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="TagNetworkInterfaces",
                actions=["ec2:CreateTags"],
                resources=[
                    stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
                ],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="PodIdentity",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[cluster.cluster_arn],
            )
        )
        if props.pull_through_cache:
            self.role.add_to_policy(pull_through_statement(self))
            cache = f"arn:<AWS::Partition>:ecr:{stack.region}:{stack.account}:repository"
            acknowledge(
                self.role,
                "IAM5",
                "A pull-through cache creates one repository per upstream image on its first "
                "pull; HyperPod nodes, like the managed GPU nodes, may do that only under the "
                "docker-hub/ prefix of this region's registry.",
                findings=[f"Resource::{cache}/docker-hub/*"],
            )
        eni = (
            f"Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:network-interface/*"
        )
        acknowledge(
            self.role,
            "IAM5",
            "The Amazon VPC CNI on a HyperPod node creates, attaches and tags ENIs whose ids "
            "exist only at run time, and pulls images of AWS-owned registries (HyperPod's "
            "agents) besides ours: the statements AWS documents for EKS orchestration.",
            findings=["Resource::*", eni],
        )


def _acknowledge_deployment_handler(
    handler: IConstruct, stack: Stack, bucket_arn: str, read: list[str]
) -> None:
    """CDK's BucketDeployment Lambda (one per stack) that uploads the lifecycle scripts."""
    acknowledge(
        handler,
        "IAM4",
        "CDK's BucketDeployment Lambda uses Lambda's basic execution policy for its logs "
        "and nothing else managed.",
        findings=[
            "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
        ],
    )
    acknowledge(
        handler,
        "IAM5",
        "CDK's BucketDeployment copies from the CDK staging bucket (read) to the lifecycle "
        "bucket (write and delete of stale objects); both grants are scoped to those two "
        "buckets, the wildcards are object keys and CDK's action groups.",
        findings=[
            *read,
            "Action::s3:DeleteObject*",
            "Action::s3:Abort*",
            f"Resource::arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-{stack.account}-"
            f"{stack.region}/*",
            f"Resource::{bucket_arn}/*",
        ],
    )
    acknowledge(
        handler,
        "L1",
        "The BucketDeployment Lambda's runtime is chosen by aws-cdk-lib together with the "
        "AWS CLI layer it ships; upgrading aws-cdk-lib moves it forward.",
    )
