"""ClusterStack: EKS with its node groups and add-ons (HyperPod joins it from the gitops
stack, once Argo CD has installed HyperPod's Helm chart)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from .parts.eks_cluster import InferenceCluster, InferenceClusterProps

__all__ = ["ClusterStack", "ClusterStackProps"]


@dataclass(frozen=True)
class ClusterStackProps:
    cluster: InferenceClusterProps
    vpc: ec2.IVpc


class ClusterStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: ClusterStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.inference = InferenceCluster(self, "Inference", props.vpc, props.cluster)
        self.cluster = self.inference.cluster
        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "ClusterArn", value=self.cluster.cluster_arn)
