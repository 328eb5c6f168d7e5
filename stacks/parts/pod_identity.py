"""Pod Identity roles with least privilege for the gateway's workloads.

Each workload gets its own role, trusted only by the EKS Pod Identity service for this
account and this cluster, and associated with exactly one namespace/service account.
What each role may do is what that workload uses, and no more:

* picker — publish its metrics, only into the `InferenceGateway` namespace;
* global router — publish fleet metrics into `InferenceGateway/Global` and read the
  ingress endpoints that every region of this environment publishes in SSM;
* External Secrets — read (GetSecretValue, DescribeSecret) exactly the Secrets Manager
  secrets the environment names (API keys, Hugging Face tokens), nothing else;
* model servers — read the S3 prefixes their `s3://` weights and adapters live under
  (GetObject there, ListBucket conditioned on those prefixes), nothing else;
* trace collector — write trace segments to X-Ray (`xray:PutTraceSegments`,
  `PutTelemetryRecords`: no resource-level permissions exist for them), where the
  environment exports traces there (`kubernetes.tracing`, docs/tracing.md);
* CloudWatch agent — write Container Insights logs of this cluster's log groups and
  publish metrics into the agent's namespaces; describe EC2 instances/volumes/tags to
  label them (those Describe calls have no resource-level permissions). Its role and
  association are built in the cluster stack (`cloudwatch_agent_identity`), because the
  add-on must not start before them: the agent reads its credentials once at start.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from envspec.global_router import GLOBAL_ROUTER

from ..nag import acknowledge
from .internal_lb import ingress_parameter_prefix
from .metrics import AGENT_NAMESPACES, CLUSTER_NAMESPACE, FLEET_NAMESPACE
from .valkey import read_store_secrets

__all__ = [
    "CLOUDWATCH_AGENT",
    "EXTERNAL_SECRETS",
    "PodIdentities",
    "PodIdentityProps",
    "Workload",
    "cloudwatch_agent_identity",
    "pod_identity",
    "s3_prefixes",
    "wildcard_findings",
    "workloads",
]


@dataclass(frozen=True)
class Workload:
    key: str
    namespace: str
    service_account: str


#: The CloudWatch observability add-on's service account.
CLOUDWATCH_AGENT = Workload("cloudwatch_agent", "amazon-cloudwatch", "cloudwatch-agent")
#: The External Secrets chart's controller (release `external-secrets`, cdk8s/charts/
#: bootstrap.py), which calls Secrets Manager for every ExternalSecret of the cluster.
EXTERNAL_SECRETS = Workload("external_secrets", "external-secrets", "external-secrets")


def workloads(
    gateway_namespace: str, tracing_namespace: str = "observability"
) -> dict[str, Workload]:
    """Service accounts of the cdk8s charts (`igw-picker`, `vllm` in the gateway
    namespace), of the External Secrets add-on and of the trace collector (its chart's
    `fullnameOverride`, cdk8s/charts/tracing.py)."""
    return {
        "trace_collector": Workload("trace_collector", tracing_namespace, "otel-collector"),
        "picker": Workload("picker", gateway_namespace, "igw-picker"),
        "global_router": Workload("global_router", gateway_namespace, GLOBAL_ROUTER),
        "external_secrets": EXTERNAL_SECRETS,
        "model_server": Workload("model_server", gateway_namespace, "vllm"),
    }


@dataclass(frozen=True)
class PodIdentityProps:
    environment: str
    cluster_name: str
    regions: tuple[str, ...]
    gateway_namespace: str = "igw"
    #: Secrets Manager secret names External Secrets reads, in `secrets_region`.
    secret_ids: tuple[str, ...] = ()
    secrets_region: str | None = None
    #: `s3://bucket/prefix` sources of the model servers' weights and adapters.
    model_sources: tuple[str, ...] = ()
    #: The global tier is on: External Secrets also reads this region's own store secrets
    #: (the router's and the pickers' store Secret, stacks/parts/valkey.py).
    global_store: bool = False
    #: The namespace of the trace collector that exports to X-Ray; None: no such export.
    xray_collector_namespace: str | None = None


def _put_metric_data(namespaces: tuple[str, ...]) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid="PutMetricDataInOwnNamespaces",
        actions=["cloudwatch:PutMetricData"],
        resources=["*"],  # PutMetricData has no resource type; the condition scopes it.
        conditions={"StringEquals": {"cloudwatch:namespace": list(namespaces)}},
    )


def s3_prefixes(sources: tuple[str, ...]) -> dict[str, list[str]]:
    """`s3://bucket/a/b` sources -> bucket -> prefixes (`a/b`), sorted, duplicates merged."""
    out: dict[str, set[str]] = {}
    for source in sources:
        bucket, _, prefix = source.removeprefix("s3://").partition("/")
        out.setdefault(bucket, set()).add(prefix.strip("/"))
    return {bucket: sorted(prefixes) for bucket, prefixes in sorted(out.items())}


def _read_s3(partition: str, sources: tuple[str, ...]) -> list[iam.PolicyStatement]:
    """Read-only on the named prefixes: objects under them, listing only within them."""
    statements = []
    for bucket, prefixes in s3_prefixes(sources).items():
        arn = f"arn:{partition}:s3:::{bucket}"
        statements.append(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[f"{arn}/{p}/*" if p else f"{arn}/*" for p in prefixes],
            )
        )
        listing = [f"{p}/*" for p in prefixes if p] + [p for p in prefixes if p]
        statements.append(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[arn],
                conditions={"StringLike": {"s3:prefix": sorted(listing)}}
                if all(prefixes)
                else None,
            )
        )
    return statements


def _cloudwatch_agent_statements(stack: Stack, cluster_name: str) -> list[iam.PolicyStatement]:
    log_groups = stack.format_arn(
        service="logs",
        resource="log-group",
        resource_name=f"/aws/containerinsights/{cluster_name}/*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    return [
        _put_metric_data((*AGENT_NAMESPACES, CLUSTER_NAMESPACE)),
        iam.PolicyStatement(
            sid="WriteContainerInsightsLogs",
            actions=[
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:DescribeLogStreams",
                "logs:PutLogEvents",
                "logs:PutRetentionPolicy",
            ],
            resources=[log_groups, f"{log_groups}:log-stream:*"],
        ),
        iam.PolicyStatement(
            sid="DescribeNodesForLabels",
            actions=["ec2:DescribeInstances", "ec2:DescribeTags", "ec2:DescribeVolumes"],
            resources=["*"],
        ),
    ]


def pod_identity(
    scope: Construct,
    *,
    cluster_name: str,
    workload: Workload,
    statements: list[iam.PolicyStatement],
    reason: str | None = None,
) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
    """A role only Pod Identity of this account's cluster may assume, its policy, and the
    association to one namespace/service account (children of `scope`)."""
    stack = Stack.of(scope)
    cluster_arn = stack.format_arn(service="eks", resource="cluster", resource_name=cluster_name)
    name = _camel(workload.key)
    role = iam.Role(
        scope,
        f"{name}Role",
        # Pod Identity assumes the role and tags the session (namespace, service
        # account, pod); both only for this account's cluster.
        assumed_by=iam.SessionTagsPrincipal(
            iam.ServicePrincipal("pods.eks.amazonaws.com").with_conditions(
                {
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {"aws:SourceArn": cluster_arn},
                }
            )
        ),
        description=f"Pod Identity of {workload.namespace}/{workload.service_account}",
    )
    policy = iam.Policy(scope, f"{name}Policy", statements=statements)
    policy.attach_to_role(role)
    findings = wildcard_findings(policy)
    if findings:
        acknowledge(
            policy,
            "IAM5",
            reason
            or "Wildcards only where AWS offers no narrower resource: cloudwatch:"
            "PutMetricData (no resource type; scoped by the cloudwatch:namespace "
            "condition), ec2:Describe* (read-only, no resource type), the X-Ray trace "
            "writes (no resource type), the log "
            "groups/streams and SSM parameters under this cluster's own prefixes, the "
            "six random characters Secrets Manager appends to a secret's ARN, and the "
            "objects under the model servers' named S3 prefixes.",
            findings=findings,
        )
    association = eks.CfnPodIdentityAssociation(
        scope,
        f"{name}Association",
        cluster_name=cluster_name,
        namespace=workload.namespace,
        service_account=workload.service_account,
        role_arn=role.role_arn,
    )
    return role, association


def cloudwatch_agent_identity(
    scope: Construct, cluster_name: str
) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
    """The CloudWatch agent's role and association (the cluster stack builds them and makes
    the add-on depend on the association)."""
    return pod_identity(
        scope,
        cluster_name=cluster_name,
        workload=CLOUDWATCH_AGENT,
        statements=_cloudwatch_agent_statements(Stack.of(scope), cluster_name),
    )


class PodIdentities(Construct):
    """One role and one `AWS::EKS::PodIdentityAssociation` per workload; External Secrets
    only where the environment names secrets, model servers only where weights or
    adapters come from S3."""

    def __init__(self, scope: Construct, construct_id: str, props: PodIdentityProps) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        parameters = [
            f"arn:{stack.partition}:ssm:{region}:{stack.account}:parameter"
            f"{ingress_parameter_prefix(props.environment, region)}/*"
            for region in props.regions
        ]
        statements = {
            "picker": [_put_metric_data((CLUSTER_NAMESPACE,))],
            "global_router": [
                _put_metric_data((FLEET_NAMESPACE,)),
                iam.PolicyStatement(
                    sid="ReadPeerEndpoints",
                    actions=["ssm:GetParameter", "ssm:GetParametersByPath"],
                    resources=parameters,
                ),
            ],
        }
        external_secrets: list[iam.PolicyStatement] = []
        if props.secret_ids:
            region = props.secrets_region or stack.region
            external_secrets.append(
                iam.PolicyStatement(
                    sid="ReadNamedSecrets",
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    # Secrets Manager appends "-" and six random characters to the name.
                    resources=[
                        f"arn:{stack.partition}:secretsmanager:{region}:{stack.account}"
                        f":secret:{secret_id}-??????"
                        for secret_id in sorted(set(props.secret_ids))
                    ],
                )
            )
        if props.global_store:  # the region-local SecretStore of the store Secret
            external_secrets.append(read_store_secrets(stack, props.environment))
        if external_secrets:
            statements["external_secrets"] = external_secrets
        if props.model_sources:
            statements["model_server"] = _read_s3(stack.partition, props.model_sources)
        if props.xray_collector_namespace is not None:
            statements["trace_collector"] = [
                iam.PolicyStatement(
                    sid="WriteTraces",
                    actions=["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
                    resources=["*"],  # X-Ray defines no resource type for these
                )
            ]
        self.roles: dict[str, iam.Role] = {}
        self.associations: dict[str, eks.CfnPodIdentityAssociation] = {}
        tracing_namespace = props.xray_collector_namespace or "observability"
        for key, workload in workloads(props.gateway_namespace, tracing_namespace).items():
            if key not in statements:
                continue
            self.roles[key], self.associations[key] = pod_identity(
                self,
                cluster_name=props.cluster_name,
                workload=workload,
                statements=statements[key],
            )


def wildcard_findings(policy: iam.Policy) -> list[str]:
    """`Resource::<arn>` for each wildcard resource of the policy, as cdk-nag names them."""
    stack = Stack.of(policy)
    found = []
    for statement in policy.document.to_json()["Statement"]:
        resources = statement["Resource"]
        for resource in resources if isinstance(resources, list) else [resources]:
            text = _nag_text(stack.resolve(resource))
            if "*" in text:
                found.append(f"Resource::{text}")
    return found


def _nag_text(value: object) -> str:
    """cdk-nag renders `Fn::Join` parts and writes `Ref: AWS::Partition` as `<AWS::Partition>`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(_nag_text(p) for p in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    return str(value)


def _camel(key: str) -> str:
    return "".join(part.capitalize() for part in key.split("_"))
