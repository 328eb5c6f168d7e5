"""The gateway's image: the ECR repository, and the release the rendered manifests name.

The charts (cdk8s/charts/base.py `gateway_image`) run
`<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<kubernetes.image_tag>`, so that
exact image is what `cdk deploy` builds and pushes: `GatewayRelease` stages
`gateway_src/` as a Docker image asset whose tag is the environment's `image_tag` and
whose destination is the environment's repository (not the CDK bootstrap's asset
repository). Docker is needed at deploy time, not at synth.

Two consequences of asset publishing: the repository must exist before the stack that
holds the release is deployed (the release lives in the GitOps stack, which depends on
the images stack), and the bootstrap's image-publishing role may push to the repository
(its repository policy says so). Tags are immutable: cdk-assets skips a tag that already
exists, so a code change ships under a new `kubernetes.image_tag`, never over an old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import (
    AssetStaging,
    DefaultStackSynthesizer,
    Fn,
    IgnoreMode,
    RemovalPolicy,
    Stack,
)
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from constructs import Construct

__all__ = [
    "DOCKER_HUB_CACHE_PREFIX",
    "GATEWAY_SRC",
    "DockerHubCache",
    "DockerHubCacheProps",
    "GatewayImage",
    "GatewayImageProps",
    "GatewayRelease",
    "GatewayReleaseProps",
    "GatewayReplication",
    "GatewayReplicationProps",
    "pull_through_statement",
    "release_synthesizer",
]

GATEWAY_SRC = Path(__file__).resolve().parents[2] / "gateway_src"
_EXCLUDE = ["**/__pycache__", "*.egg-info", "**/*.pyc", ".pytest_cache"]
#: What cdk-assets does to publish an image (the bootstrap role's own ECR statement).
_PUSH_ACTIONS = [
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:CompleteLayerUpload",
    "ecr:DescribeImages",
    "ecr:DescribeRepositories",
    "ecr:GetDownloadUrlForLayer",
    "ecr:InitiateLayerUpload",
    "ecr:PutImage",
    "ecr:UploadLayerPart",
]


def _publishing_role_arn() -> str:
    """The bootstrap's image-publishing role (default qualifier) of the stack's account."""
    template = DefaultStackSynthesizer.DEFAULT_IMAGE_ASSET_PUBLISHING_ROLE_ARN.replace(
        "${Qualifier}", DefaultStackSynthesizer.DEFAULT_QUALIFIER
    )
    return Fn.sub(template)


def release_synthesizer(repository_name: str) -> DefaultStackSynthesizer:
    """The synthesizer of the stack that holds a `GatewayRelease`: image assets go to
    the gateway's repository, tagged with nothing but the release tag."""
    return DefaultStackSynthesizer(
        image_assets_repository_name=repository_name, docker_tag_prefix=""
    )


def _bind_for_python(synthesizer: DefaultStackSynthesizer, stack: Stack) -> None:
    """Make the stack's synthesizer callable from Python.

    A stack binds a reusable synthesizer as `Object.create(synthesizer)`, a copy Python
    cannot reach; the original is not bound, so its `add_*_asset` methods fail. Binding
    the original to the same stack fixes that, and the asset lands in the stack's
    manifest (the bound copy shares the original's asset-manifest builder; tests/stacks
    check the written `.assets.json`).
    """
    synthesizer.bind(stack)  # once: a second GatewayRelease in the stack fails here


@dataclass(frozen=True)
class GatewayImageProps:
    repository_name: str
    keep_images: int = 50


class GatewayImage(Construct):
    """The repository: scanned on push, immutable tags, KMS, kept on stack deletion."""

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
        self.repository.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CdkAssetPublishing",
                principals=[iam.ArnPrincipal(_publishing_role_arn())],
                actions=_PUSH_ACTIONS,
            )
        )


@dataclass(frozen=True)
class GatewayReleaseProps:
    repository_name: str
    tag: str
    context: Path = GATEWAY_SRC


class GatewayRelease(Construct):
    """`gateway_src/` built and pushed as `<repository>:<tag>`; `image_uri` names it.

    `synthesizer` is the one the enclosing stack was given (`release_synthesizer`),
    passed in rather than read back from the stack, which jsii would hand over as a
    foreign reference.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: GatewayReleaseProps,
        *,
        synthesizer: DefaultStackSynthesizer,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        staging = AssetStaging(
            self,
            "Context",
            source_path=str(props.context),
            exclude=_EXCLUDE,
            ignore_mode=IgnoreMode.DOCKER,
        )
        _bind_for_python(synthesizer, stack)
        location = synthesizer.add_docker_image_asset(
            source_hash=props.tag,
            directory_name=staging.relative_staged_path(stack),
            platform="linux/amd64",
        )
        self.repository_name = props.repository_name
        self.tag = props.tag
        self.image_uri = location.image_uri


@dataclass(frozen=True)
class GatewayReplicationProps:
    repository_prefix: str
    destination_regions: tuple[str, ...]


class GatewayReplication(Construct):
    """The primary region's registry copies the gateway's repositories to the secondary
    regions, so every cluster pulls the very image (same digest) from its own region.

    ECR keeps one replication configuration per registry (account and region): this one
    replaces whatever the primary region's registry had (docs/infrastructure.md).
    """

    def __init__(self, scope: Construct, construct_id: str, props: GatewayReplicationProps) -> None:
        super().__init__(scope, construct_id)
        account = Stack.of(self).account
        self.configuration = ecr.CfnReplicationConfiguration(
            self,
            "Configuration",
            replication_configuration=ecr.CfnReplicationConfiguration.ReplicationConfigurationProperty(
                rules=[
                    ecr.CfnReplicationConfiguration.ReplicationRuleProperty(
                        destinations=[
                            ecr.CfnReplicationConfiguration.ReplicationDestinationProperty(
                                region=region, registry_id=account
                            )
                            for region in props.destination_regions
                        ],
                        repository_filters=[
                            ecr.CfnReplicationConfiguration.RepositoryFilterProperty(
                                filter=props.repository_prefix, filter_type="PREFIX_MATCH"
                            )
                        ],
                    )
                ]
            ),
        )


#: The ECR repository prefix of the Docker Hub cache; the charts name images under it
#: (cdk8s/charts/base.py DOCKER_HUB_CACHE_PREFIX must be the same).
DOCKER_HUB_CACHE_PREFIX = "docker-hub"
DOCKER_HUB = "registry-1.docker.io"


@dataclass(frozen=True)
class DockerHubCacheProps:
    #: ARN of this region's Secrets Manager secret (`ecr-pullthroughcache/...`).
    credential_arn: str


class DockerHubCache(Construct):
    """A pull-through cache rule: `<registry>/docker-hub/vllm/vllm-openai` is pulled from
    Docker Hub once and then served by this region's ECR (the vLLM images).

    Docker Hub needs credentials for a cache rule, in a secret named
    `ecr-pullthroughcache/...` in the rule's own account and region (ECR docs, "Creating
    a pull through cache rule"): a prerequisite, like the ACM certificates. The first
    pull of a tag creates the repository, which is why the nodes may call
    `ecr:CreateRepository` and `ecr:BatchImportUpstreamImage` on `docker-hub/*`
    (`pull_through_statement`).
    """

    def __init__(self, scope: Construct, construct_id: str, props: DockerHubCacheProps) -> None:
        super().__init__(scope, construct_id)
        self.rule = ecr.CfnPullThroughCacheRule(
            self,
            "Rule",
            ecr_repository_prefix=DOCKER_HUB_CACHE_PREFIX,
            upstream_registry="docker-hub",
            upstream_registry_url=DOCKER_HUB,
            credential_arn=props.credential_arn,
        )


def pull_through_statement(scope: Construct) -> iam.PolicyStatement:
    """What a node needs beyond image pulls to fill the cache on a first pull."""
    stack = Stack.of(scope)
    return iam.PolicyStatement(
        sid="FillDockerHubCache",
        actions=["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
        resources=[
            stack.format_arn(
                service="ecr", resource="repository", resource_name=f"{DOCKER_HUB_CACHE_PREFIX}/*"
            )
        ],
    )
