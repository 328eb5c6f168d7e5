"""ImagesStack: the gateway's ECR repository (the release image is pushed by GitOpsStack)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from .parts.images import GatewayImage, GatewayImageProps

__all__ = ["ImagesStack", "ImagesStackProps"]


@dataclass(frozen=True)
class ImagesStackProps:
    image: GatewayImageProps


class ImagesStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: ImagesStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.image = GatewayImage(self, "Gateway", props.image)
        CfnOutput(self, "RepositoryUri", value=self.image.repository.repository_uri)
