"""Ingress, Pod Identity, images, observability and the GitOps bootstrap."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from aws_cdk.assertions import Match

if TYPE_CHECKING:
    from conftest import Synth

PRIMARY, SECONDARY = "us-east-1", "us-west-2"


# --- ingress -------------------------------------------------------------------------


def test_load_balancer_is_internal_only(any_synth: Synth) -> None:
    for region in any_synth.env.aws.regions:
        template = any_synth.template(region, "ingress")
        template.resource_count_is("AWS::ElasticLoadBalancingV2::LoadBalancer", 1)
        template.has_resource_properties(
            "AWS::ElasticLoadBalancingV2::LoadBalancer",
            {"Scheme": "internal", "Type": "network"},
        )
        template.has_resource_properties(
            "AWS::EC2::SecurityGroup",
            {
                "SecurityGroupIngress": [
                    {
                        "CidrIp": "10.0.0.0/8",
                        "IpProtocol": "tcp",
                        "FromPort": 443,
                        "ToPort": 443,
                        "Description": Match.any_value(),
                    }
                ]
            },
        )
        text = json.dumps(any_synth.raw(region, "ingress"))
        assert "0.0.0.0/0" not in text
        assert "internet-facing" not in text


def test_tls_listener_uses_the_regional_acm_certificate(prod_synth: Synth) -> None:
    for region in (PRIMARY, SECONDARY):
        arn = prod_synth.env.ingress.certificate_arns[region]
        template = prod_synth.template(region, "ingress")
        template.has_resource_properties(
            "AWS::ElasticLoadBalancingV2::Listener",
            {
                "Port": 443,
                "Protocol": "TLS",
                "Certificates": [{"CertificateArn": arn}],
                "SslPolicy": "ELBSecurityPolicy-TLS13-1-2-Res-2021-06",
            },
        )
        template.has_resource_properties(
            "AWS::ElasticLoadBalancingV2::TargetGroup",
            {"Name": "igw-prod-envoy", "Port": 10443, "Protocol": "TLS", "TargetType": "ip"},
        )


def test_no_certificate_is_requested_for_a_private_name(any_synth: Synth) -> None:
    """Issue 30 item 9. ACM issues a DNS-validated certificate only once its validation
    CNAME resolves in public DNS, and gives up after 72 hours (ACM user guide, "DNS
    validation"); `AWS::CertificateManager::Certificate` stays in CREATE_IN_PROGRESS
    until then, so dev's ingress stack, which requested one for its private name with no
    hosted zone, never finished. Now no template requests a certificate: a region with an
    ACM certificate (a prerequisite, checked by `make preflight`) terminates TLS on it, a
    region without one passes TCP 443 through to Envoy's HTTPS listener, which presents
    the certificate cert-manager issues in the cluster (Secret `igw-tls`)."""
    for path in any_synth.templates:
        resources = json.loads(path.read_text())["Resources"].values()
        assert not [r for r in resources if r["Type"] == "AWS::CertificateManager::Certificate"]
    env = any_synth.env
    for region in env.aws.regions:
        (listener,) = any_synth.resources(
            region, "ingress", "AWS::ElasticLoadBalancingV2::Listener"
        ).values()
        props = listener["Properties"]
        assert props["Port"] == 443
        if region in env.ingress.certificate_arns:
            assert props["Protocol"] == "TLS"
            arn = env.ingress.certificate_arns[region]
            assert props["Certificates"] == [{"CertificateArn": arn}]
        else:
            assert props["Protocol"] == "TCP" and "Certificates" not in props
    if any_synth.name == "dev":  # dev lists none: TLS ends at Envoy, as in the issue
        assert not env.ingress.certificate_arns


def test_the_global_router_needs_a_certificate_in_every_region() -> None:
    """The router serves plain HTTP behind its NLB, so that NLB must terminate TLS: an
    environment with the global tier and a region without a certificate is refused at
    load time, before a stack would wait on a certificate request."""
    import yaml

    from envspec.environment import REPO_ROOT, EnvironmentSpec

    data = yaml.safe_load((REPO_ROOT / "gitops/environments/prod/environment.yaml").read_text())
    del data["ingress"]["certificate_arns"]["us-west-2"]
    with pytest.raises(ValueError, match=r"ingress\.certificate_arns: .* us-west-2"):
        EnvironmentSpec.model_validate(data)


def test_each_region_publishes_its_own_endpoint_for_the_global_router(prod_synth: Synth) -> None:
    for region in (PRIMARY, SECONDARY):
        prod_synth.template(region, "ingress").has_resource_properties(
            "AWS::SSM::Parameter",
            {
                "Name": f"/igw/prod/{region}/ingress/endpoint",
                "Value": f"https://{region}.inference.internal.example.com",
            },
        )


# --- identity ------------------------------------------------------------------------


def _policy_of(
    synth: Synth, region: str, name: str, stack: str = "identity"
) -> list[dict[str, object]]:
    policies = synth.resources(region, stack, "AWS::IAM::Policy")
    (policy,) = [
        p
        for lid, p in policies.items()
        if lid.startswith((f"PodIdentities{name}Policy", f"Inference{name}Policy"))
    ]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_pod_identity_roles_trust_only_pod_identity_of_this_cluster(prod_synth: Synth) -> None:
    template = prod_synth.template(PRIMARY, "identity")
    # picker, global router, External Secrets (prod names secrets; no s3:// weights), and
    # the OpenTelemetry Collector's X-Ray writer (prod is traced: kubernetes.tracing)
    template.resource_count_is("AWS::IAM::Role", 4)
    template.all_resources_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                        "Condition": {
                            "StringEquals": {"aws:SourceAccount": "222222222222"},
                            "ArnEquals": {
                                "aws:SourceArn": {
                                    "Fn::Join": [
                                        "",
                                        [
                                            "arn:",
                                            {"Ref": "AWS::Partition"},
                                            ":eks:us-east-1:222222222222:cluster/igw-prod",
                                        ],
                                    ]
                                }
                            },
                        },
                    },
                ],
                "Version": "2012-10-17",
            }
        },
    )
    for namespace, account in (
        ("igw", "igw-picker"),
        ("igw", "igw-global-router"),
        ("external-secrets", "external-secrets"),
    ):
        template.has_resource_properties(
            "AWS::EKS::PodIdentityAssociation",
            {
                "ClusterName": "igw-prod",
                "Namespace": namespace,
                "ServiceAccount": account,
                "RoleArn": Match.any_value(),
            },
        )


def test_picker_may_only_put_metrics_into_its_namespace(prod_synth: Synth) -> None:
    assert _policy_of(prod_synth, PRIMARY, "Picker") == [
        {
            "Action": "cloudwatch:PutMetricData",
            "Condition": {"StringEquals": {"cloudwatch:namespace": ["InferenceGateway"]}},
            "Effect": "Allow",
            "Resource": "*",
            "Sid": "PutMetricDataInOwnNamespaces",
        }
    ]


def test_global_router_reads_only_this_environments_endpoints(prod_synth: Synth) -> None:
    statements = _policy_of(prod_synth, PRIMARY, "GlobalRouter")
    assert [s["Sid"] for s in statements] == ["PutMetricDataInOwnNamespaces", "ReadPeerEndpoints"]
    assert statements[0]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": ["InferenceGateway/Global"]}
    }
    ssm = statements[1]
    assert ssm["Action"] == ["ssm:GetParameter", "ssm:GetParametersByPath"]
    resources = json.dumps(ssm["Resource"])
    for region in (PRIMARY, SECONDARY):
        assert f":ssm:{region}:222222222222:parameter/igw/prod/{region}/ingress/*" in resources
    assert len(ssm["Resource"]) == 2


def test_cloudwatch_agent_writes_only_its_clusters_logs(prod_synth: Synth) -> None:
    statements = _policy_of(prod_synth, SECONDARY, "CloudwatchAgent", stack="cluster")
    by_sid = {s["Sid"]: s for s in statements}
    assert set(by_sid) == {
        "PutMetricDataInOwnNamespaces",
        "WriteContainerInsightsLogs",
        "DescribeNodesForLabels",
    }
    assert by_sid["PutMetricDataInOwnNamespaces"]["Condition"]["StringEquals"][
        "cloudwatch:namespace"
    ] == ["ContainerInsights", "CWAgent", "InferenceGateway"]
    logs = json.dumps(by_sid["WriteContainerInsightsLogs"]["Resource"])
    assert ":logs:us-west-2:222222222222:log-group:/aws/containerinsights/igw-prod/*" in logs
    assert all(a.startswith("ec2:Describe") for a in by_sid["DescribeNodesForLabels"]["Action"])


# --- images --------------------------------------------------------------------------


def test_ecr_repository_scans_and_keeps_tags_immutable(any_synth: Synth) -> None:
    template = any_synth.template(PRIMARY, "images")
    template.has_resource_properties(
        "AWS::ECR::Repository",
        {
            "RepositoryName": f"igw-{any_synth.name}/gateway",
            "ImageScanningConfiguration": {"ScanOnPush": True},
            "ImageTagMutability": "IMMUTABLE",
            "EncryptionConfiguration": {"EncryptionType": "KMS"},
        },
    )
    # cdk-assets pushes the release with the bootstrap's publishing role: the repository
    # policy lets exactly that role push.
    template.has_resource_properties(
        "AWS::ECR::Repository",
        {
            "RepositoryPolicyText": {
                "Statement": [
                    Match.object_like(
                        {
                            "Sid": "CdkAssetPublishing",
                            "Effect": "Allow",
                            "Action": Match.array_with(["ecr:DescribeImages", "ecr:PutImage"]),
                            "Principal": {
                                "AWS": {
                                    "Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/"
                                    "cdk-hnb659fds-image-publishing-role-${AWS::AccountId}-"
                                    "${AWS::Region}"
                                }
                            },
                        }
                    )
                ]
            }
        },
    )
    images = json.loads(
        (any_synth.outdir / f"{any_synth.stack_name(PRIMARY, 'images')}.assets.json").read_text()
    )
    assert images.get("dockerImages", {}) == {}  # the image is the release, in gitops


def _release(synth: Synth, region: str) -> dict[str, Any]:
    assets = json.loads(
        (synth.outdir / f"{synth.stack_name(region, 'gitops')}.assets.json").read_text()
    )
    (image,) = assets["dockerImages"].values()
    return image


def test_cdk_pushes_the_image_the_charts_run(any_synth: Synth) -> None:
    """The gateway image the picker and BBR Deployments name is the one cdk deploy pushes:
    same registry, repository and tag (`kubernetes.image_tag`)."""
    from charts.base import gateway_image

    env = any_synth.env
    for region in env.aws.secondary_regions:
        # Built once: the secondary regions get the same image (digest) by replication,
        # after the primary region has pushed it.
        assets = json.loads(
            (any_synth.outdir / f"{any_synth.stack_name(region, 'gitops')}.assets.json").read_text()
        )
        assert assets.get("dockerImages", {}) == {}
        primary_gitops = any_synth.stack(env.aws.region, "gitops")
        assert primary_gitops in any_synth.stack(region, "gitops").dependencies
    for region in env.aws.regions[:1]:
        image = _release(any_synth, region)
        staged = any_synth.outdir / image["source"]["directory"]
        assert (staged / "Dockerfile").is_file()
        assert (staged / "inference_gateway" / "__init__.py").is_file()
        assert image["source"]["platform"] == "linux/amd64"
        (destination,) = image["destinations"].values()
        assert destination["repositoryName"] == f"igw-{any_synth.name}/gateway"
        assert destination["imageTag"] == env.kubernetes.image_tag
        assert destination["region"] == region
        if region == env.aws.region:
            pushed = (
                f"{env.aws.account}.dkr.ecr.{region}.amazonaws.com/"
                f"{destination['repositoryName']}:{destination['imageTag']}"
            )
            assert pushed == gateway_image(env)
        # The repository exists before cdk-assets pushes into it.
        assert any_synth.stack(region, "images") in any_synth.stack(region, "gitops").dependencies
        template = any_synth.template(region, "gitops")
        template.has_output(
            "GatewayImageUri",
            {
                "Value": {
                    "Fn::Sub": f"{env.aws.account}.dkr.ecr.{region}.${{AWS::URLSuffix}}/"
                    f"igw-{any_synth.name}/gateway:{env.kubernetes.image_tag}"
                }
            },
        )


# --- observability -------------------------------------------------------------------

CLUSTER_ALARMS = {
    # alarm id: (metric or expression, statistic, threshold key, comparison)
    "KvCacheHigh": ("KvCacheUtilization", "Average", "kv_cache_utilization_max", "Greater"),
    "TtftP99High": ("TimeToFirstToken", "p99", "ttft_p99_max_s", "Greater"),
    "ReadyPodsLow": ("ReadyPods", "Minimum", "ready_pods_min", "Less"),
}
RATE_ALARMS = {
    "ErrorRateHigh": ("errors / requests", "Errors", "error_rate_max"),
    "RateLimitedHigh": ("limited / requests", "RateLimited", "rate_limited_max"),
}


def test_each_cluster_alarm_has_its_metric_and_threshold(any_synth: Synth) -> None:
    alarms = any_synth.env.alarms
    name = any_synth.env.cluster.name
    for region in any_synth.env.aws.regions:
        template = any_synth.template(region, "observability")
        for alarm_id, (metric, statistic, key, op) in CLUSTER_ALARMS.items():
            template.has_resource_properties(
                "AWS::CloudWatch::Alarm",
                {
                    "AlarmName": f"{name}-{alarm_id}",
                    "Namespace": "InferenceGateway",
                    "MetricName": metric,
                    "Dimensions": [{"Name": "Cluster", "Value": name}],
                    ("ExtendedStatistic" if statistic == "p99" else "Statistic"): statistic,
                    "Threshold": getattr(alarms, key),
                    "ComparisonOperator": Match.string_like_regexp(f"^{op}Than"),
                    "AlarmActions": [Match.any_value()],
                },
            )
        for alarm_id, (expression, numerator, key) in RATE_ALARMS.items():
            template.has_resource_properties(
                "AWS::CloudWatch::Alarm",
                {
                    "AlarmName": f"{name}-{alarm_id}",
                    "Threshold": getattr(alarms, key),
                    "ComparisonOperator": "GreaterThanThreshold",
                    "Metrics": Match.array_with(
                        [
                            Match.object_like({"Expression": f"IF(requests > 0, {expression}, 0)"}),
                            Match.object_like(
                                {
                                    "MetricStat": Match.object_like(
                                        {
                                            "Metric": Match.object_like(
                                                {
                                                    "MetricName": numerator,
                                                    "Namespace": "InferenceGateway",
                                                }
                                            ),
                                            "Stat": "Sum",
                                        }
                                    )
                                }
                            ),
                        ]
                    ),
                },
            )
        template.resource_count_is("AWS::CloudWatch::Dashboard", 2 if region == PRIMARY else 1)


def test_fleet_alarm_and_dashboard_live_in_the_primary_region(prod_synth: Synth) -> None:
    primary = prod_synth.template(PRIMARY, "observability")
    primary.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": "igw-prod-FailoverEvents",
            "Namespace": "InferenceGateway/Global",
            "MetricName": "FailoverEvents",
            "Statistic": "Sum",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )
    primary.has_resource_properties(
        "AWS::SNS::Subscription",
        {"Protocol": "email", "Endpoint": "inference-oncall@example.com"},
    )
    body = json.dumps(
        next(
            r["Properties"]["DashboardBody"]
            for r in prod_synth.resources(
                PRIMARY, "observability", "AWS::CloudWatch::Dashboard"
            ).values()
            if "fleet" in r["Properties"]["DashboardName"]
        )
    )
    for metric in ("RoutingDecisions", "FailoverEvents", "RateLimitHits"):
        assert metric in body
    prod_synth.template(SECONDARY, "observability").resource_count_is("AWS::CloudWatch::Alarm", 5)


# --- GitOps bootstrap ----------------------------------------------------------------


def test_argocd_chart_and_root_application(any_synth: Synth) -> None:
    template = any_synth.template(PRIMARY, "gitops")
    template.has_resource_properties(
        "Custom::AWSCDK-EKS-HelmChart",
        Match.object_like(
            {
                "Chart": "argo-cd",
                "Repository": "https://argoproj.github.io/argo-helm",
                "Version": any_synth.env.gitops.argocd_chart_version,
                "Namespace": "argocd",
                "CreateNamespace": True,
            }
        ),
    )
    (application,) = [
        doc
        for docs in any_synth.manifests(PRIMARY, "gitops").values()
        for doc in docs
        if doc["kind"] == "Application"
    ]
    assert application["spec"]["source"] == {
        "repoURL": any_synth.env.gitops.repo_url,
        "targetRevision": "main",
        "path": "gitops/bootstrap",
    }
    assert application["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}


def test_argocd_registers_its_own_cluster_for_the_environment(any_synth: Synth) -> None:
    """The ApplicationSet deploys an environment only to clusters labelled with it."""
    for region in any_synth.env.aws.regions:
        manifests = any_synth.manifests(region, "gitops")
        (secret,) = [d for docs in manifests.values() for d in docs if d["kind"] == "Secret"]
        assert secret["stringData"] == {
            "name": "in-cluster",
            "server": "https://kubernetes.default.svc",
        }
        assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == (
            "in-cluster",
            "argocd",
        )
        # CDK adds its prune label next to ours.
        assert (
            secret["metadata"]["labels"].items()
            >= {
                "argocd.argoproj.io/secret-type": "cluster",
                "igw.dev/environment": any_synth.name,
            }.items()
        )
        resources = any_synth.raw(region, "gitops")["Resources"]
        assert all(resources[name]["Properties"]["Overwrite"] for name in manifests)
        kinds = {tuple(d["kind"] for d in docs): name for name, docs in manifests.items()}
        (chart,) = [
            name for name, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
        ]
        # Secret after the chart (its namespace), the root Application after both.
        assert chart in resources[kinds[("Secret",)]]["DependsOn"]
        assert {chart, kinds[("Secret",)]} <= set(resources[kinds[("Application",)]]["DependsOn"])


def test_the_cluster_label_is_the_one_the_applicationset_selects() -> None:
    from charts.bootstrap import ENV_LABEL
    from stacks.parts.argocd import ENVIRONMENT_LABEL, cluster_secret

    assert ENVIRONMENT_LABEL == ENV_LABEL
    secret = cluster_secret("dev", "us-east-1", "igw-dev", target_group_arn="arn:example")
    assert secret["metadata"]["labels"][ENV_LABEL] == "dev"


def test_the_cluster_secret_carries_the_arn_of_the_target_group_envoy_binds(
    any_synth: Synth,
) -> None:
    """Issue 30 item 8: Envoy's TargetGroupBinding names its group by ARN, because
    aws-load-balancer-controller v2.13 resolves `targetGroupName` only when a binding is
    created (`webhooks/elbv2/targetgroupbinding_mutator.go`: `MutateCreate` calls
    `getArnFromNameIfNeeded`, `MutateUpdate` does not) and re-registration on rollouts is
    reported broken by name (#4438, #4297). The ARN exists only once CloudFormation
    creates the group, so the gitops stack annotates Argo CD's cluster Secret with the
    ingress stack's target group (an export of that stack), and the workloads' Application
    patches it in (tests/gitops/test_gitops_target_group_arn.py)."""
    from charts.gateway import ENVOY_SERVICE, LISTENER_PORT, _target_group_binding_spec
    from envspec.argocd_manifests import TARGET_GROUP_ARN_ANNOTATION

    binding = _target_group_binding_spec()
    assert binding["serviceRef"] == {"name": ENVOY_SERVICE, "port": LISTENER_PORT}
    assert "targetGroupName" not in binding
    for region in any_synth.env.aws.regions:
        groups = any_synth.resources(region, "ingress", "AWS::ElasticLoadBalancingV2::TargetGroup")
        ((group_id, group),) = groups.items()
        assert group["Properties"]["TargetType"] == binding["targetType"]
        # Envoy Gateway serves the 443 listener on container port 443 + 10000.
        assert group["Properties"]["Port"] == LISTENER_PORT + 10000
        outputs = any_synth.raw(region, "ingress")["Outputs"]
        (export,) = [
            o["Export"]["Name"]
            for o in outputs.values()
            if o["Value"] == {"Ref": group_id} and "Export" in o
        ]
        resources = any_synth.raw(region, "gitops")["Resources"]
        (secret,) = [r for n, r in resources.items() if n.startswith("ArgoCdInClusterSecret")]
        _, parts = secret["Properties"]["Manifest"]["Fn::Join"]
        at = parts.index({"Fn::ImportValue": export})
        assert parts[at - 1].endswith(f'"annotations":{{"{TARGET_GROUP_ARN_ANNOTATION}":"')
