"""ClusterStack: EKS with its node groups and add-ons, and HyperPod where enabled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .parts.eks_cluster import InferenceCluster, InferenceClusterProps
from .parts.hyperpod import HyperPodCluster, HyperPodProps

__all__ = ["ClusterStack", "ClusterStackProps"]


@dataclass(frozen=True)
class ClusterStackProps:
    cluster: InferenceClusterProps
    vpc: ec2.IVpc
    access_logs: s3.IBucket
    hyperpod_zones: tuple[str, ...] | None = None  # None: no HyperPod in this region


class ClusterStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: ClusterStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.inference = InferenceCluster(self, "Inference", props.vpc, props.cluster)
        self.cluster = self.inference.cluster
        self.hyperpod: HyperPodCluster | None = None
        spec = props.cluster.spec
        if spec.hyperpod.enabled and props.hyperpod_zones is not None:
            self.hyperpod = HyperPodCluster(
                self,
                "HyperPod",
                self.cluster,
                props.vpc,
                HyperPodProps(
                    spec=spec.hyperpod,
                    cluster_name=spec.name,
                    zones=props.hyperpod_zones,
                    access_logs=props.access_logs,
                ),
            )
            # HyperPod joins nodes to the cluster; its add-ons must be there first.
            for addon in self.inference.addons.values():
                self.hyperpod.cluster.node.add_dependency(addon)
        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "ClusterArn", value=self.cluster.cluster_arn)
