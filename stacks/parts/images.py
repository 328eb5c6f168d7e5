"""The gateway's image: an ECR repository for releases and the image asset built at deploy.

The asset is built from `gateway_src/` by `cdk deploy` (Docker is needed then, not at
synth: synth only stages the build context). The repository is where CI pushes tagged
releases; tags are immutable and every push is scanned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

__all__ = ["GATEWAY_SRC", "GatewayImage", "GatewayImageProps"]

GATEWAY_SRC = Path(__file__).resolve().parents[2] / "gateway_src"


@dataclass(frozen=True)
class GatewayImageProps:
    repository_name: str
    keep_images: int = 50
    context: Path = GATEWAY_SRC


class GatewayImage(Construct):
    def __init__(self, scope: Construct, construct_id: str, props: GatewayImageProps) -> None:
        super().__init__(scope, construct_id)
        self.repository = ecr.Repository(
            self,
            "Repository",
            repository_name=props.repository_name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.KMS,
            lifecycle_rules=[ecr.LifecycleRule(max_image_count=props.keep_images)],
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Asset",
            directory=str(props.context),
            platform=ecr_assets.Platform.LINUX_AMD64,
            exclude=["**/__pycache__", "*.egg-info", "**/*.pyc", ".pytest_cache"],
        )
