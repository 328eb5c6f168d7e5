"""Ingress, Pod Identity, images, observability and the GitOps bootstrap."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

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


def test_dev_requests_a_dns_validated_certificate(dev_synth: Synth) -> None:
    dev_synth.template(PRIMARY, "ingress").has_resource_properties(
        "AWS::CertificateManager::Certificate",
        {
            "DomainName": "inference.internal.example.com",
            "SubjectAlternativeNames": ["us-east-1.inference.internal.example.com"],
            "ValidationMethod": "DNS",
        },
    )


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
    # picker, global router, External Secrets (prod names secrets; no s3:// weights)
    template.resource_count_is("AWS::IAM::Role", 3)
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
    manifests = any_synth.resources(PRIMARY, "gitops", "Custom::AWSCDK-EKS-KubernetesResource")
    (application,) = [
        doc
        for resource in manifests.values()
        for doc in json.loads(resource["Properties"]["Manifest"])
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
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "in-cluster",
            "namespace": "argocd",
            "labels": {
                "argocd.argoproj.io/secret-type": "cluster",
                "igw.dev/environment": any_synth.name,
            },
        },
        "stringData": {"name": "in-cluster", "server": "https://kubernetes.default.svc"},
    }
    for region in any_synth.env.aws.regions:
        template = any_synth.template(region, "gitops")
        # CDK adds its prune label next to ours.
        labels = Match.object_like(secret["metadata"]["labels"])  # type: ignore[index]
        template.has_resource_properties(
            "Custom::AWSCDK-EKS-KubernetesResource",
            {
                "Manifest": Match.serialized_json(
                    [{**secret, "metadata": {**secret["metadata"], "labels": labels}}]  # type: ignore[dict-item]
                ),
                "Overwrite": True,
            },
        )
        resources = any_synth.raw(region, "gitops")["Resources"]
        kinds = {
            tuple(d["kind"] for d in json.loads(r["Properties"]["Manifest"])): name
            for name, r in resources.items()
            if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        }
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
    assert cluster_secret("dev", "us-east-1", "igw-dev")["metadata"]["labels"][ENV_LABEL] == "dev"


def test_the_target_group_is_the_one_envoys_binding_names(any_synth: Synth) -> None:
    """One NLB: the cdk8s TargetGroupBinding joins Envoy's pods to this group by name."""
    from charts.gateway import ENVOY_SERVICE, LISTENER_PORT, _target_group_binding_spec

    binding = _target_group_binding_spec(any_synth.env)
    assert binding["serviceRef"] == {"name": ENVOY_SERVICE, "port": LISTENER_PORT}
    for region in any_synth.env.aws.regions:
        template = any_synth.template(region, "ingress")
        template.resource_count_is("AWS::ElasticLoadBalancingV2::TargetGroup", 1)
        template.has_resource_properties(
            "AWS::ElasticLoadBalancingV2::TargetGroup",
            {
                "Name": binding["targetGroupName"],
                "TargetType": binding["targetType"],
                # Envoy Gateway serves the 443 listener on container port 443 + 10000.
                "Port": LISTENER_PORT + 10000,
            },
        )
