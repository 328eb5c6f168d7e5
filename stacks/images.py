"""ImagesStack: the gateway's ECR repository (the release image is pushed by GitOpsStack
in the primary region and replicated from there), and the region's Docker Hub cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from .parts.images import (
    DockerHubCache,
    DockerHubCacheProps,
    GatewayImage,
    GatewayImageProps,
    GatewayReplication,
    GatewayReplicationProps,
)

__all__ = ["ImagesStack", "ImagesStackProps"]


@dataclass(frozen=True)
class ImagesStackProps:
    image: GatewayImageProps
    #: Primary region only, when there are secondary regions.
    replication: GatewayReplicationProps | None = None
    docker_hub: DockerHubCacheProps | None = None


class ImagesStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: ImagesStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.image = GatewayImage(self, "Gateway", props.image)
        self.replication = (
            GatewayReplication(self, "Replication", props.replication)
            if props.replication
            else None
        )
        self.docker_hub = (
            DockerHubCache(self, "DockerHub", props.docker_hub) if props.docker_hub else None
        )
        CfnOutput(self, "RepositoryUri", value=self.image.repository.repository_uri)
