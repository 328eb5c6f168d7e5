"""A SageMaker HyperPod cluster whose orchestrator is the EKS cluster.

HyperPod brings resilient GPU nodes (deep health checks, automatic node replacement) into
the same EKS cluster as the managed node groups, so the picker routes to HyperPod pods
exactly as to any other pod of a pool. The lifecycle script is shipped from
`stacks/assets/hyperpod/` to a private bucket; the instance groups run in the private
subnets of the zones the environment lists and share the cluster security group.
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
from constructs import Construct

from envspec.infra import HyperPodSpec

from ..nag import acknowledge

__all__ = ["LIFECYCLE_DIR", "HyperPodCluster", "HyperPodProps"]

LIFECYCLE_DIR = Path(__file__).resolve().parent.parent / "assets" / "hyperpod"
_PREFIX = "lifecycle"


@dataclass(frozen=True)
class HyperPodProps:
    spec: HyperPodSpec
    cluster_name: str
    zones: tuple[str, ...]
    access_logs: s3.IBucket


class HyperPodCluster(Construct):
    """`AWS::SageMaker::Cluster` with `Orchestrator.Eks.ClusterArn` = the EKS cluster."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        cluster: eks.Cluster,
        vpc: ec2.IVpc,
        props: HyperPodProps,
    ) -> None:
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


def _acknowledge_deployment_handler(
    handler: Construct, stack: Stack, bucket_arn: str, read: list[str]
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
