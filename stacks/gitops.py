"""GitOpsStack: ArgoCD, its in-cluster Secret and the root Application on the region's
cluster, the gateway release image those manifests run (pushed before the stack), and,
where the environment attaches one, the SageMaker HyperPod cluster: it must be created
after Argo CD has installed HyperPod's Helm chart, which only this stack can wait for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from .parts.argocd import ArgoCdBootstrap, ArgoCdProps
from .parts.hyperpod import HyperPodCluster, HyperPodProps
from .parts.images import GatewayRelease, GatewayReleaseProps, release_synthesizer

__all__ = ["GitOpsStack", "GitOpsStackProps", "HyperPodPlacement"]


@dataclass(frozen=True)
class HyperPodPlacement:
    props: HyperPodProps
    vpc: ec2.IVpc


@dataclass(frozen=True)
class GitOpsStackProps:
    argocd: ArgoCdProps
    cluster: eks.ICluster
    #: The image of `kubernetes.image_tag`; its repository (ImagesStack) must deploy first.
    release: GatewayReleaseProps | None = None
    #: The HyperPod cluster of this region (primary only), None where there is none.
    hyperpod: HyperPodPlacement | None = None


class GitOpsStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: GitOpsStackProps, **kwargs: Any
    ) -> None:
        if props.release is not None:
            kwargs["synthesizer"] = release_synthesizer(props.release.repository_name)
        super().__init__(scope, construct_id, **kwargs)
        self.argocd = ArgoCdBootstrap(self, "ArgoCd", props.cluster, props.argocd)
        self.release: GatewayRelease | None = None
        if props.release is not None:
            self.release = GatewayRelease(
                self, "Release", props.release, synthesizer=kwargs["synthesizer"]
            )
            CfnOutput(self, "GatewayImageUri", value=self.release.image_uri)
        self.hyperpod: HyperPodCluster | None = None
        if props.hyperpod is not None:
            self.hyperpod = HyperPodCluster(
                self,
                "HyperPod",
                props.cluster,
                props.hyperpod.vpc,
                props.hyperpod.props,
                argocd=self.argocd,
            )
