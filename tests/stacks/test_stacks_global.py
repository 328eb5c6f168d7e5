"""The fleet tier's stacks: Valkey per region, the global router's NLB and its Application,
the private DNS, and the fleet alarms against what `igw global` writes.

cdk-nag and cfn-lint run over these templates with the rest of the environment
(tests/stacks/test_stacks_synth.py).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from aws_cdk import Environment
from aws_cdk.assertions import Match, Template

from envspec.environment import load_environment
from envspec.global_router import (
    GLOBAL_ROUTER,
    STORE_AUTH_KEY,
    STORE_URL_KEY,
    global_folder,
    global_target_group_name,
    rate_limit_store_secret_name,
    resolved_clusters,
    store_secret_names,
)
from inference_gateway.errors import ConfigError
from inference_gateway.telemetry.emf import FLEET_METRICS, fleet_record
from stacks.application import new_app
from stacks.global_dns import GlobalDnsStack, GlobalDnsStackProps, RegionalEndpoints
from stacks.parts.global_lb import unhealthy_alarm_name
from stacks.parts.valkey import read_store_secrets

if TYPE_CHECKING:
    from conftest import Synth

REGIONS = ("us-east-1", "us-west-2")
GITOPS = Path(__file__).resolve().parents[2] / "gitops"


def _one(synth: Synth, region: str, part: str, kind: str) -> dict[str, Any]:
    (resource,) = synth.resources(region, part, kind).values()
    return resource["Properties"]


def test_dev_has_no_global_tier(dev_synth: Synth) -> None:
    assert not dev_synth.env.global_router.enabled
    assert not [p for p in dev_synth.templates if re.search(r"-(fleet|dns)\.", p.name)]


@pytest.mark.parametrize("region", REGIONS)
def test_valkey_is_tls_only_with_auth_multi_az_and_encrypted(prod_synth: Synth, region) -> None:
    group = _one(prod_synth, region, "fleet", "AWS::ElastiCache::ReplicationGroup")
    store = prod_synth.env.global_router.store
    assert group["Engine"] == "valkey"
    assert group["EngineVersion"] == store.engine_version
    assert group["TransitEncryptionEnabled"] is True
    assert group["TransitEncryptionMode"] == "required"
    assert group["AtRestEncryptionEnabled"] is True
    assert "Fn::GetAtt" in group["KmsKeyId"]
    assert group["MultiAZEnabled"] is True and group["AutomaticFailoverEnabled"] is True
    # One shard: the router's rate-limit script touches several keys in one call.
    assert group["NumNodeGroups"] == 1
    assert group["ReplicasPerNodeGroup"] == store.replicas
    assert group["Port"] == store.port != 6379
    # The token is resolved by CloudFormation from Secrets Manager, never in the template.
    token = json.dumps(group["AuthToken"])
    assert re.search(r"\{\{resolve:secretsmanager:", token), token
    assert f"SecretString:{STORE_AUTH_KEY}::" in token


@pytest.mark.parametrize("region", REGIONS)
def test_store_admits_the_cluster_security_group_and_the_peers_on_its_port_only(
    prod_synth: Synth, region
) -> None:
    """The cluster security group (gateway, picker and router pods); in the primary region
    also the secondary regions' VPC ranges, over the peering, for the shared rate limits."""
    env = prod_synth.env
    template = prod_synth.template(region, "fleet")
    groups = prod_synth.resources(region, "fleet", "AWS::EC2::SecurityGroup")
    (store_sg,) = [
        g for g in groups.values() if "store" in g["Properties"]["GroupDescription"].lower()
    ]
    props = store_sg["Properties"]
    port = env.global_router.store.port
    rules = props["SecurityGroupIngress"]
    for rule in rules:
        assert (rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (port, port, "tcp")
    (cluster_rule,) = [r for r in rules if "CidrIp" not in r]
    assert "ClusterSecurityGroupId" in json.dumps(cluster_rule["SourceSecurityGroupId"])
    peers = env.aws.secondary_regions if region == env.aws.region else []
    assert peers or region != env.aws.region, "prod's primary has peers: the test must bite"
    assert sorted(r["CidrIp"] for r in rules if "CidrIp" in r) == sorted(
        env.cluster.vpc_cidr_of(p) for p in peers
    )
    # Nothing outbound: CDK's placeholder rule that matches no traffic.
    assert [e["CidrIp"] for e in props["SecurityGroupEgress"]] == ["255.255.255.255/32"]
    template.resource_count_is("AWS::ElastiCache::SubnetGroup", 1)


@pytest.mark.parametrize("region", REGIONS)
def test_connection_secrets_have_the_names_the_pods_read(prod_synth: Synth, region) -> None:
    secrets = prod_synth.resources(region, "fleet", "AWS::SecretsManager::Secret")
    by_name = {s["Properties"]["Name"]: s["Properties"] for s in secrets.values()}
    auth, endpoint = store_secret_names("prod")
    shared = (
        {rate_limit_store_secret_name("prod")} if region == prod_synth.env.aws.region else set()
    )
    assert set(by_name) == {auth, endpoint} | shared
    assert by_name[auth]["GenerateSecretString"]["GenerateStringKey"] == STORE_AUTH_KEY
    url = json.dumps(by_name[endpoint]["SecretString"])
    assert "rediss://" in url and "PrimaryEndPoint.Address" in url


@pytest.mark.parametrize("region", REGIONS)
def test_the_read_statement_for_external_secrets_matches_the_secrets(
    prod_synth: Synth, region
) -> None:
    """`read_store_secrets` (for External Secrets' Pod Identity role) covers exactly the
    two secrets the region's fleet stack creates, by name pattern, in that region."""
    stack = prod_synth.stack(region, "fleet")
    statement = stack.resolve(read_store_secrets(stack, "prod").to_statement_json())
    patterns = [_joined(r) for r in statement["Resource"]]
    secrets = prod_synth.resources(region, "fleet", "AWS::SecretsManager::Secret")
    # The rate-limit store's secret is a replica outside the primary (not a resource).
    names = sorted(
        {*(s["Properties"]["Name"] for s in secrets.values())}
        | {rate_limit_store_secret_name("prod")}
    )
    assert len(patterns) == len(names) == 3
    for pattern, name in zip(sorted(patterns), names, strict=True):
        assert f":secretsmanager:{region}:222222222222:secret:{name}-??????" in pattern
    actions = {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}
    assert set(statement["Action"]) == actions


def test_primary_replicates_its_store_url_and_token_to_every_secondary(prod_synth: Synth) -> None:
    """One rate-limit budget across regions: the primary's URL and AUTH token (a dynamic
    reference to the token secret, never the value) in a secret replicated to each
    secondary region, where the routers' External Secrets read it locally."""
    env = prod_synth.env
    secrets = prod_synth.resources(env.aws.region, "fleet", "AWS::SecretsManager::Secret")
    (shared,) = [
        s["Properties"]
        for s in secrets.values()
        if s["Properties"]["Name"] == rate_limit_store_secret_name("prod")
    ]
    assert [r["Region"] for r in shared["ReplicaRegions"]] == env.aws.secondary_regions
    value = json.dumps(shared["SecretString"])
    assert f'\\"{STORE_URL_KEY}\\"' in value and "PrimaryEndPoint.Address" in value
    assert "{{resolve:secretsmanager:" in value and f":SecretString:{STORE_AUTH_KEY}::" in value
    for region in env.aws.secondary_regions:
        names = {
            s["Properties"]["Name"]
            for s in prod_synth.resources(region, "fleet", "AWS::SecretsManager::Secret").values()
        }
        assert rate_limit_store_secret_name("prod") not in names


@pytest.mark.parametrize("region", REGIONS)
def test_router_nlb_checks_readiness_and_alarms_by_a_derived_name(
    prod_synth: Synth, region
) -> None:
    template = prod_synth.template(region, "fleet")
    template.has_resource_properties(
        "AWS::ElasticLoadBalancingV2::LoadBalancer", {"Scheme": "internal", "Type": "network"}
    )
    template.has_resource_properties(
        "AWS::ElasticLoadBalancingV2::TargetGroup",
        {
            "Name": global_target_group_name("prod"),
            "TargetType": "ip",
            "Port": prod_synth.env.global_router.port,
            "HealthCheckProtocol": "HTTP",
            "HealthCheckPath": "/health",
            "Matcher": {"HttpCode": "200"},
        },
    )
    template.has_resource_properties(
        "AWS::ElasticLoadBalancingV2::Listener",
        {"Port": 443, "Protocol": "TLS", "Certificates": Match.any_value()},
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": unhealthy_alarm_name("prod", region),
            "MetricName": "HealthyHostCount",
            "Namespace": "AWS/NetworkELB",
            "ComparisonOperator": "LessThanThreshold",
            "Threshold": 1,
            "TreatMissingData": "breaching",
        },
    )


@pytest.mark.parametrize("region", REGIONS)
def test_application_syncs_the_regions_own_rendered_folder(prod_synth: Synth, region) -> None:
    (resource,) = prod_synth.resources(
        region, "fleet", "Custom::AWSCDK-EKS-KubernetesResource"
    ).values()
    manifest = json.loads(_joined(resource["Properties"]["Manifest"]))
    (application,) = manifest
    assert application["kind"] == "Application"
    path = application["spec"]["source"]["path"]
    assert path == f"gitops/{global_folder('prod', region)}"
    assert sorted((GITOPS.parent / path).glob("*.k8s.yaml")), f"{path} is not rendered"
    assert application["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    # The AppProject gitops/bootstrap declares must admit it (source, destination).
    bootstrap = GITOPS / "bootstrap" / "inference-gateway.k8s.yaml"
    (project,) = [
        d
        for d in yaml.safe_load_all(bootstrap.read_text())
        if d
        and d["kind"] == "AppProject"
        and d["metadata"]["name"] == application["spec"]["project"]
    ]
    assert application["spec"]["source"]["repoURL"] in project["spec"]["sourceRepos"]
    namespace = application["spec"]["destination"]["namespace"]
    assert {"server": "*", "namespace": namespace} in project["spec"]["destinations"]
    stack = prod_synth.stack(region, "fleet")
    assert prod_synth.stack(region, "gitops") in stack.dependencies
    # The router's TargetGroupBinding by ARN (issue 30 item 8: aws-load-balancer-
    # controller v2.13 resolves a name on create only): this stack's own target group.
    (patch,) = application["spec"]["source"]["kustomize"]["patches"]
    assert patch["target"]["kind"] == "TargetGroupBinding"
    assert patch["target"]["name"] == GLOBAL_ROUTER
    assert patch["patch"] == "- op: add\n  path: /spec/targetGroupARN\n  value: TOKEN\n"
    groups = prod_synth.resources(region, "fleet", "AWS::ElasticLoadBalancingV2::TargetGroup")
    (group_id,) = groups
    assert {"Ref": group_id} in resource["Properties"]["Manifest"]["Fn::Join"][1]


def _joined(value: Any) -> str:
    """A manifest with tokens in it is an Fn::Join; the tokens do not matter here."""
    if isinstance(value, str):
        return value
    sep, parts = value["Fn::Join"]
    return sep.join(p if isinstance(p, str) else "TOKEN" for p in parts)


def test_private_zone_spans_every_vpc_with_a_latency_record_per_region(
    prod_synth: Synth,
) -> None:
    primary = prod_synth.env.aws.region
    zone = _one(prod_synth, primary, "dns", "AWS::Route53::HostedZone")
    domain = prod_synth.env.ingress.domain_name
    assert zone["Name"] == domain
    assert [v["VPCRegion"] for v in zone["VPCs"]] == list(REGIONS)
    records = [
        r["Properties"]
        for r in prod_synth.resources(primary, "dns", "AWS::Route53::RecordSet").values()
    ]
    latency = {r["Region"]: r for r in records if r["Name"] == domain}
    assert set(latency) == set(REGIONS)
    for region, record in latency.items():
        assert record["SetIdentifier"] == region
        assert record["AliasTarget"]["EvaluateTargetHealth"] is True
        assert "HealthCheckId" in record
    # The names the routers call resolve in the same zone (envspec.global_router).
    regional = {r["Name"] for r in records if r["Name"] != domain}
    hosts = {
        c.endpoint.removeprefix("https://").rstrip("/") for c in resolved_clusters(prod_synth.env)
    }
    assert regional == hosts


def test_health_checks_read_the_alarms_the_regions_define(prod_synth: Synth) -> None:
    """Route 53 health checkers are outside every VPC and cannot reach an internal NLB;
    for private zones Route 53 documents health checks on a CloudWatch alarm (Route 53
    Developer Guide, "Configuring failover in a private hosted zone"). So every check is
    CLOUDWATCH_METRIC, and each names an alarm that its region's stack really creates."""
    primary = prod_synth.env.aws.region
    checks = prod_synth.resources(primary, "dns", "AWS::Route53::HealthCheck")
    seen = set()
    for check in checks.values():
        config = check["Properties"]["HealthCheckConfig"]
        assert config["Type"] == "CLOUDWATCH_METRIC"
        alarm = config["AlarmIdentifier"]
        alarms = prod_synth.resources(alarm["Region"], "fleet", "AWS::CloudWatch::Alarm")
        assert alarm["Name"] in {a["Properties"]["AlarmName"] for a in alarms.values()}
        seen.add(alarm["Region"])
    assert seen == set(REGIONS)


def _fleet_alarm(synth: Synth) -> dict[str, Any]:
    alarms = synth.resources(synth.env.aws.region, "observability", "AWS::CloudWatch::Alarm")
    (failover,) = [
        a["Properties"]
        for a in alarms.values()
        if a["Properties"].get("AlarmName") == "igw-prod-FailoverEvents"
    ]
    return failover


def _emf_names(record: dict[str, Any]) -> tuple[str, set[str], set[str]]:
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    (dimensions,) = directive["Dimensions"]
    return directive["Namespace"], set(dimensions), {m["Name"] for m in directive["Metrics"]}


def _dashboard_metrics(synth: Synth) -> set[tuple[str, str]]:
    dashboards = synth.resources(
        synth.env.aws.region, "observability", "AWS::CloudWatch::Dashboard"
    )
    (fleet,) = [
        d for d in dashboards.values() if "fleet" in json.dumps(d["Properties"]["DashboardName"])
    ]
    body = json.loads(_joined(fleet["Properties"]["DashboardBody"]))
    return {(m[0], m[1]) for w in body["widgets"] for m in w["properties"].get("metrics", [])}


def test_failover_alarm_and_dashboard_read_the_telemetry_emf_names(prod_synth: Synth) -> None:
    """Against `telemetry.emf.fleet_record`, which `igw global` calls (main has no router)."""
    record = fleet_record("prod", {k: 1 for k in FLEET_METRICS}, 0)
    namespace, dimensions, names = _emf_names(record)
    alarm = _fleet_alarm(prod_synth)
    assert alarm["Namespace"] == namespace
    assert alarm["MetricName"] == "FailoverEvents" and "FailoverEvents" in names
    assert {d["Name"] for d in alarm["Dimensions"]} == dimensions
    assert _dashboard_metrics(prod_synth) == {(namespace, n) for n in names}


def test_failover_alarm_reads_what_the_router_itself_writes(prod_synth: Synth) -> None:
    """The record `igw global` writes (its FleetEmfEmitter over its own Prometheus
    counters), after a failover: the alarm's metric must be in it with a count of 1. The
    fleet record is the first line; per-cluster records follow it."""
    from inference_gateway.telemetry import global_metrics as metrics

    fleet = metrics.GlobalMetrics()
    out = io.StringIO()
    emitter = metrics.FleetEmfEmitter(fleet, environment="prod", interval_s=60, stream=out)
    fleet.failovers.labels(cluster="prod-us-east-1", reason="status_stale").inc()
    fleet.decisions.labels(cluster="prod-us-west-2", profile="latency", attempt="retry").inc()
    fleet.rate_limit_hits.labels(scope="global").inc()
    record = emitter.emit()
    assert json.loads(out.getvalue().splitlines()[0]) == record
    namespace, dimensions, names = _emf_names(record)
    alarm = _fleet_alarm(prod_synth)
    assert (alarm["Namespace"], alarm["MetricName"]) == (namespace, "FailoverEvents")
    assert record["FailoverEvents"] == 1
    assert {d["Name"]: d["Value"] for d in alarm["Dimensions"]} == {
        d: record[d] for d in dimensions
    }
    assert _dashboard_metrics(prod_synth) == {(namespace, n) for n in names}


def _dns_template(drained: tuple[str, ...]) -> dict[str, Any]:
    app = new_app()
    endpoints = tuple(
        RegionalEndpoints(
            region=region,
            vpc_id=f"vpc-{i}",
            router_dns=f"router-{i}.elb.{region}.amazonaws.com",
            router_zone="Z26RNL4JYFTOTI",
            cluster_dns=f"envoy-{i}.elb.{region}.amazonaws.com",
            cluster_zone="Z26RNL4JYFTOTI",
            unhealthy_alarm=unhealthy_alarm_name("prod", region),
        )
        for i, region in enumerate(REGIONS)
    )
    stack = GlobalDnsStack(
        app,
        "Dns",
        GlobalDnsStackProps("prod", "inference.example.com", endpoints, drained=drained),
        env=Environment(account="222222222222", region=REGIONS[0]),
    )
    return Template.from_stack(stack).to_json()


def test_a_drained_region_leaves_dns_and_comes_back() -> None:
    """Draining takes both names of the region out (clients and routers stop resolving
    it); the zone stays associated with its VPC, so its clients resolve the others."""

    def names(template: dict[str, Any]) -> list[tuple[str, str | None]]:
        return sorted(
            (r["Properties"]["Name"], r["Properties"].get("Region"))
            for r in template["Resources"].values()
            if r["Type"] == "AWS::Route53::RecordSet"
        )

    both, drained = _dns_template(()), _dns_template(("us-west-2",))
    domain = "inference.example.com"
    assert names(both) == sorted(
        [(domain, r) for r in REGIONS] + [(f"{r}.{domain}", None) for r in REGIONS]
    )
    assert names(drained) == [(domain, "us-east-1"), (f"us-east-1.{domain}", None)]
    (zone,) = [r for r in drained["Resources"].values() if r["Type"] == "AWS::Route53::HostedZone"]
    assert [v["VPCRegion"] for v in zone["Properties"]["VPCs"]] == list(REGIONS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drained_regions": ["eu-west-1"]}, "drained_regions[0]: 'eu-west-1' is not one"),
        ({"drained_regions": list(REGIONS)}, "every region drained"),
        ({"clusters": [{"region": "eu-west-1"}]}, "clusters[0].region: 'eu-west-1'"),
        ({"clusters": [{"region": "us-east-1", "name": "a"}] * 2}, "duplicate names"),
        ({"replicas": 1}, "replicas"),
        ({"store": {"port": 6379, "nodes": 2}}, "nodes"),
    ],
)
def test_bad_global_router_sections_fail_with_the_field_path(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    data = yaml.safe_load((GITOPS / "environments/prod/environment.yaml").read_text())
    data["global_router"] = {**data["global_router"], **change}
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    assert message in str(caught.value)
