"""Pod Identity roles with least privilege for the gateway's workloads.

Each workload gets its own role, trusted only by the EKS Pod Identity service for this
account and this cluster, and associated with exactly one namespace/service account.
What each role may do is what that workload uses, and no more:

* picker — publish its metrics, only into the `InferenceGateway` namespace;
* global router — publish fleet metrics into `InferenceGateway/Global` and read the
  ingress endpoints that every region of this environment publishes in SSM;
* CloudWatch agent — write Container Insights logs of this cluster's log groups and
  publish metrics into the agent's namespaces; describe EC2 instances/volumes/tags to
  label them (those Describe calls have no resource-level permissions).
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from ..nag import acknowledge
from .internal_lb import ingress_parameter_prefix
from .metrics import AGENT_NAMESPACES, CLUSTER_NAMESPACE, FLEET_NAMESPACE

__all__ = ["PodIdentities", "PodIdentityProps", "Workload", "workloads"]


@dataclass(frozen=True)
class Workload:
    key: str
    namespace: str
    service_account: str


def workloads(gateway_namespace: str) -> dict[str, Workload]:
    """Service accounts: the cdk8s charts' (`igw-picker` in the gateway namespace) and the
    CloudWatch observability add-on's (`amazon-cloudwatch/cloudwatch-agent`)."""
    return {
        "picker": Workload("picker", gateway_namespace, "igw-picker"),
        "global_router": Workload("global_router", gateway_namespace, "igw-global-router"),
        "cloudwatch_agent": Workload("cloudwatch_agent", "amazon-cloudwatch", "cloudwatch-agent"),
    }


@dataclass(frozen=True)
class PodIdentityProps:
    environment: str
    cluster_name: str
    regions: tuple[str, ...]
    gateway_namespace: str = "igw"


def _put_metric_data(namespaces: tuple[str, ...]) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid="PutMetricDataInOwnNamespaces",
        actions=["cloudwatch:PutMetricData"],
        resources=["*"],  # PutMetricData has no resource type; the condition scopes it.
        conditions={"StringEquals": {"cloudwatch:namespace": list(namespaces)}},
    )


class PodIdentities(Construct):
    """One role and one `AWS::EKS::PodIdentityAssociation` per workload."""

    def __init__(self, scope: Construct, construct_id: str, props: PodIdentityProps) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        cluster_arn = stack.format_arn(
            service="eks", resource="cluster", resource_name=props.cluster_name
        )
        parameters = [
            f"arn:{stack.partition}:ssm:{region}:{stack.account}:parameter"
            f"{ingress_parameter_prefix(props.environment, region)}/*"
            for region in props.regions
        ]
        log_groups = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"/aws/containerinsights/{props.cluster_name}/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
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
            "cloudwatch_agent": [
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
            ],
        }
        self.roles: dict[str, iam.Role] = {}
        self.associations: dict[str, eks.CfnPodIdentityAssociation] = {}
        for key, workload in workloads(props.gateway_namespace).items():
            role = iam.Role(
                self,
                f"{_camel(key)}Role",
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
            policy = iam.Policy(self, f"{_camel(key)}Policy", statements=statements[key])
            policy.attach_to_role(role)
            acknowledge(
                policy,
                "IAM5",
                "Wildcards only where AWS offers no narrower resource: cloudwatch:"
                "PutMetricData (no resource type; scoped by the cloudwatch:namespace "
                "condition), ec2:Describe* (read-only, no resource type), and the log "
                "groups/streams and SSM parameters under this cluster's own prefixes.",
                findings=_findings(policy),
            )
            self.roles[key] = role
            self.associations[key] = eks.CfnPodIdentityAssociation(
                self,
                f"{_camel(key)}Association",
                cluster_name=props.cluster_name,
                namespace=workload.namespace,
                service_account=workload.service_account,
                role_arn=role.role_arn,
            )


def _findings(policy: iam.Policy) -> list[str]:
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
        return sep.join(_nag_text(p) for p in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    return str(value)


def _camel(key: str) -> str:
    return "".join(part.capitalize() for part in key.split("_"))
