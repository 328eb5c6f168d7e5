"""GitOpsStack: ArgoCD and the root Application on the region's cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from .parts.argocd import ArgoCdBootstrap, ArgoCdProps

__all__ = ["GitOpsStack", "GitOpsStackProps"]


@dataclass(frozen=True)
class GitOpsStackProps:
    argocd: ArgoCdProps
    cluster: eks.ICluster


class GitOpsStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: GitOpsStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.argocd = ArgoCdBootstrap(self, "ArgoCd", props.cluster, props.argocd)
