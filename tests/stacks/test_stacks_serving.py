"""What a real cluster needs from the CDK side to serve (issue 16): health checks that see
TLS, Pod Identity for the add-ons and model servers, images from the region's own
registry, Karpenter's AWS half."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from conftest import Synth

GITOPS = Path(__file__).resolve().parents[2] / "gitops" / "environments"


def _rendered(env_name: str) -> list[dict]:
    out: list[dict] = []
    for path in sorted((GITOPS / env_name / "rendered").glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


# --- ingress health ------------------------------------------------------------------


def test_nlb_health_check_completes_a_tls_handshake_with_envoy(any_synth: Synth) -> None:
    """A TCP health check only opens a connection, so it stays green while every TLS
    handshake fails (Envoy's `filter_chain_not_found`); an HTTPS health check completes
    the handshake and needs an HTTP answer (ELB docs, "Health checks for Network Load
    Balancer target groups": HTTPS checks on TLS target groups, matcher 200-599 allowed).
    It asks the port the NLB sends traffic to, which is Envoy's HTTPS listener in the
    rendered Gateway (Envoy Gateway maps listener 443 to container port 10443). The same
    HTTPS check behind a TCP listener (TLS passed through, no ACM certificate): ELB allows
    HTTPS checks on TCP target groups too."""
    for region in any_synth.env.aws.regions:
        groups = any_synth.resources(region, "ingress", "AWS::ElasticLoadBalancingV2::TargetGroup")
        (group,) = groups.values()
        props = group["Properties"]
        terminated = region in any_synth.env.ingress.certificate_arns
        assert props["Protocol"] == ("TLS" if terminated else "TCP")
        assert props["Port"] == any_synth.env.ingress.target_port
        assert props["HealthCheckProtocol"] == "HTTPS"
        assert props.get("HealthCheckPort", "traffic-port") == "traffic-port"
        low, _, high = props["Matcher"]["HttpCode"].partition("-")
        # Envoy answering at all (404 for an unrouted path, 401 without a key) is healthy;
        # a 5xx is not.
        assert int(low) == 200 and 404 <= int(high) < 500
    (gateway,) = [d for d in _rendered(any_synth.name) if d["kind"] == "Gateway"]
    assert [(x["protocol"], x["port"]) for x in gateway["spec"]["listeners"]] == [("HTTPS", 443)]


# --- Pod Identity for External Secrets and model servers ----------------------------------


def _identity_policy(synth: Synth, region: str, name: str) -> list[dict]:
    policies = synth.resources(region, "identity", "AWS::IAM::Policy")
    (policy,) = [p for lid, p in policies.items() if lid.startswith(f"PodIdentities{name}Policy")]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_external_secrets_reads_only_the_secrets_the_environment_names(any_synth: Synth) -> None:
    """External Secrets' controller calls GetSecretValue with the credentials of its own
    pod (the AWS SDK's default chain, so Pod Identity) when the store names no auth
    (External Secrets docs, "AWS Access": "Controller's Pod Identity"); the rendered
    ClusterSecretStore names none. Secrets Manager ARNs end in `-` and six random
    characters (Secrets Manager docs, "ARN format"), so each secret is named with
    `-??????` and nothing broader."""
    env = any_synth.env
    wanted = {s.hf_token_secret_id for s in env.model_servers if s.hf_token_secret_id}
    if env.kubernetes.auth:
        wanted.add(env.kubernetes.auth.api_keys_secret_id)
    assert wanted
    for region in env.aws.regions:
        statements = {s["Sid"]: s for s in _identity_policy(any_synth, region, "ExternalSecrets")}
        # With the global tier, the region-local SecretStore of the store Secret (the
        # router's and the pickers') reads this region's store secrets, nothing else.
        store = statements.pop("ReadGlobalStoreSecrets", None)
        assert (store is not None) == env.global_router.enabled
        if store is not None:
            for resource in store["Resource"]:
                text = "".join(p if isinstance(p, str) else "" for p in resource["Fn::Join"][1])
                assert f":secretsmanager:{region}:" in text and "/global-store/" in text
        (statement,) = statements.values()
        assert sorted(statement["Action"]) == [
            "secretsmanager:DescribeSecret",
            "secretsmanager:GetSecretValue",
        ]
        resources = statement["Resource"]
        resources = resources if isinstance(resources, list) else [resources]
        names = set()
        for resource in resources:
            text = "".join(p if isinstance(p, str) else "" for p in resource["Fn::Join"][1])
            # The store reads the primary region's secrets from every cluster.
            assert f":secretsmanager:{env.aws.region}:{env.aws.account}:secret:" in text
            assert text.endswith("-??????") and "*" not in text
            names.add(text.split(":secret:")[1].removesuffix("-??????"))
        assert names == wanted
        template = any_synth.template(region, "identity")
        (store,) = [d for d in _rendered(any_synth.name) if d["kind"] == "ClusterSecretStore"]
        assert "auth" not in store["spec"]["provider"]["aws"]
        assert store["spec"]["provider"]["aws"]["region"] == env.aws.region
        template.has_resource_properties(
            "AWS::EKS::PodIdentityAssociation",
            {"Namespace": "external-secrets", "ServiceAccount": "external-secrets"},
        )


def test_model_servers_read_only_their_s3_prefixes() -> None:
    """vLLM's Run:ai streamer reads `s3://` weights with the pod's default AWS
    credentials (vLLM docs, "Loading models with Run:ai Model Streamer"): the `vllm`
    service account gets GetObject under the named prefixes and ListBucket limited to
    them, on no other bucket."""
    from aws_cdk import App, Environment, Stack
    from aws_cdk.assertions import Template

    from stacks.parts.pod_identity import PodIdentities, PodIdentityProps

    stack = Stack(App(), "S3", env=Environment(account="111111111111", region="us-east-1"))
    PodIdentities(
        stack,
        "PodIdentities",
        PodIdentityProps(
            environment="dev",
            cluster_name="igw-dev",
            regions=("us-east-1",),
            model_sources=("s3://weights/llama/8b", "s3://weights/adapters/sql/"),
        ),
    )
    resources = Template.from_stack(stack).to_json()["Resources"]
    (policy,) = [
        r for lid, r in resources.items() if lid.startswith("PodIdentitiesModelServerPolicy")
    ]
    get, listing = policy["Properties"]["PolicyDocument"]["Statement"]
    text = str(get["Resource"])
    assert get["Action"] == "s3:GetObject"
    assert ":s3:::weights/adapters/sql/*" in text and ":s3:::weights/llama/8b/*" in text
    assert listing["Action"] == "s3:ListBucket"
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["adapters/sql", "adapters/sql/*", "llama/8b", "llama/8b/*"]}
    }
    accounts = {
        r["Properties"]["ServiceAccount"]
        for r in resources.values()
        if r["Type"] == "AWS::EKS::PodIdentityAssociation"
    }
    # No secrets named, so no External Secrets role.
    assert accounts == {"igw-picker", "igw-global-router", "vllm"}


def test_the_trace_collector_may_write_to_xray_only_where_traces_go_there() -> None:
    """The collector's `awsxray` exporter calls PutTraceSegments and PutTelemetryRecords
    (opentelemetry-collector-contrib exporter/awsxrayexporter; X-Ray defines no resource
    type for them): its service account (cdk8s/charts/tracing.py `fullnameOverride`) gets
    exactly those, and no role exists where the environment does not export to X-Ray."""
    from aws_cdk import App, Environment, Stack
    from aws_cdk.assertions import Template

    from stacks.parts.pod_identity import PodIdentities, PodIdentityProps

    def resources(namespace: str | None) -> dict[str, Any]:
        stack = Stack(App(), "T", env=Environment(account="111111111111", region="us-east-1"))
        props = PodIdentityProps(
            environment="dev",
            cluster_name="igw-dev",
            regions=("us-east-1",),
            xray_collector_namespace=namespace,
        )
        PodIdentities(stack, "PodIdentities", props)
        out: dict[str, Any] = Template.from_stack(stack).to_json()["Resources"]
        return out

    traced = resources("observability")
    (policy,) = [
        r for lid, r in traced.items() if lid.startswith("PodIdentitiesTraceCollectorPolicy")
    ]
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
    (association,) = [
        r["Properties"]
        for r in traced.values()
        if r["Type"] == "AWS::EKS::PodIdentityAssociation"
        and r["Properties"]["ServiceAccount"] == "otel-collector"
    ]
    assert association["Namespace"] == "observability"
    untraced = resources(None)
    assert not [lid for lid in untraced if lid.startswith("PodIdentitiesTraceCollector")]


# --- images from the region's own registry ------------------------------------------------


def test_primary_registry_replicates_the_gateway_repositories(any_synth: Synth) -> None:
    """ECR replication copies an image, digest unchanged, into the destination regions'
    registries (ECR docs, "Private image replication"); one configuration per registry,
    so only the primary region has one, and only where there are secondaries."""
    env = any_synth.env
    primary = any_synth.resources(env.aws.region, "images", "AWS::ECR::ReplicationConfiguration")
    if not env.aws.secondary_regions:
        assert primary == {}
        return
    (config,) = primary.values()
    (rule,) = config["Properties"]["ReplicationConfiguration"]["Rules"]
    assert rule["Destinations"] == [
        {"Region": r, "RegistryId": env.aws.account} for r in env.aws.secondary_regions
    ]
    assert rule["RepositoryFilters"] == [
        {"Filter": f"igw-{env.name}/", "FilterType": "PREFIX_MATCH"}
    ]
    for region in env.aws.secondary_regions:
        assert not any_synth.resources(region, "images", "AWS::ECR::ReplicationConfiguration")


def test_each_region_caches_docker_hub_and_its_gpu_nodes_may_fill_the_cache(
    any_synth: Synth,
) -> None:
    """A pull-through cache rule per region, with that region's credentials secret (ECR
    docs: the secret's account and Region must match the rule's); the first pull of an
    image needs `ecr:BatchImportUpstreamImage` and `ecr:CreateRepository` (ECR docs, "IAM
    permissions required to sync an upstream registry"), granted to the GPU nodes under
    `docker-hub/*` only."""
    env = any_synth.env
    assert set(env.aws.docker_hub_cache_credentials) == set(env.aws.regions)
    for region in env.aws.regions:
        (rule,) = any_synth.resources(region, "images", "AWS::ECR::PullThroughCacheRule").values()
        assert rule["Properties"] == {
            "CredentialArn": env.aws.docker_hub_cache_credentials[region],
            "EcrRepositoryPrefix": "docker-hub",
            "UpstreamRegistry": "docker-hub",
            "UpstreamRegistryUrl": "registry-1.docker.io",
        }
        policies = [
            p
            for lid, p in any_synth.resources(region, "cluster", "AWS::IAM::Policy").items()
            if "PullThroughCache" in lid and "Gpu" in lid
        ]
        (plan,) = [r.plan for r in any_synth.regions if r.plan.region == region]
        assert len(policies) == len(plan.node_groups)
        for policy in policies:
            (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
            assert sorted(statement["Action"]) == [
                "ecr:BatchImportUpstreamImage",
                "ecr:CreateRepository",
            ]
            text = "".join(
                p if isinstance(p, str) else "" for p in statement["Resource"]["Fn::Join"][1]
            )
            assert text.endswith(f":ecr:{region}:{env.aws.account}:repository/docker-hub/*")


# --- Karpenter's AWS half --------------------------------------------------------------------


def _statements(resource: dict) -> dict[str, dict]:
    return {s["Sid"]: s for s in resource["Properties"]["PolicyDocument"]["Statement"]}


def test_karpenter_gets_an_interruption_queue_fed_by_the_four_event_rules(any_synth: Synth) -> None:
    """Karpenter drains a node before EC2 takes it away only if its queue receives Spot
    interruption warnings, rebalance recommendations, instance state changes and AWS
    Health scheduled changes (Karpenter docs, "Interruption"); the queue is the one the
    controller is told (`<cluster>-karpenter`, cdk8s/charts/bootstrap.py) and refuses
    plain HTTP."""
    from envspec.names import karpenter_queue_name

    env = any_synth.env
    for region in env.aws.regions:
        ((queue_id, queue),) = any_synth.resources(region, "cluster", "AWS::SQS::Queue").items()
        assert queue["Properties"]["QueueName"] == karpenter_queue_name(env.cluster.name)
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
        rules = any_synth.resources(region, "cluster", "AWS::Events::Rule").values()
        patterns = {
            (r["Properties"]["EventPattern"]["source"][0],
             r["Properties"]["EventPattern"]["detail-type"][0])
            for r in rules
        }  # fmt: skip
        assert patterns == {
            ("aws.health", "AWS Health Event"),
            ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
            ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
            ("aws.ec2", "EC2 Instance State-change Notification"),
        }
        for rule in rules:
            (target,) = rule["Properties"]["Targets"]
            assert target["Arn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
        (policy,) = any_synth.resources(region, "cluster", "AWS::SQS::QueuePolicy").values()
        text = str(policy["Properties"]["PolicyDocument"])
        assert "events.amazonaws.com" in text and "aws:SecureTransport" in text


def test_karpenter_controller_role_is_scoped_to_this_cluster(any_synth: Synth) -> None:
    """The controller's Pod Identity (kube-system/karpenter) may create and delete only
    what carries this cluster's tag and a NodePool's, and pass only the node role
    (Karpenter 1.6 getting-started CloudFormation, `KarpenterControllerPolicy`)."""
    from envspec.names import karpenter_node_role_name

    env = any_synth.env
    cluster = env.cluster.name
    owned = f"aws:ResourceTag/kubernetes.io/cluster/{cluster}"
    for region in env.aws.regions:
        resources = any_synth.raw(region, "cluster")["Resources"]
        (association,) = [
            r["Properties"]
            for r in resources.values()
            if r["Type"] == "AWS::EKS::PodIdentityAssociation"
            and r["Properties"]["ServiceAccount"] == "karpenter"
        ]
        assert association["Namespace"] == "kube-system"
        (policy,) = [
            r
            for lid, r in resources.items()
            if r["Type"] == "AWS::IAM::Policy"
            and lid.startswith("InferenceKarpenterKarpenterPolicy")
        ]
        statements = _statements(policy)
        assert statements["DeleteOnlyOwn"]["Condition"]["StringEquals"] == {owned: "owned"}
        assert statements["DeleteOnlyOwn"]["Condition"]["StringLike"] == {
            "aws:ResourceTag/karpenter.sh/nodepool": "*"
        }
        passed = statements["PassOnlyTheNodeRole"]
        assert str(passed["Resource"]).endswith(f":role/{karpenter_node_role_name(cluster)}']]}}")
        assert passed["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
        describe = statements["DescribeThisRegion"]
        assert describe["Condition"] == {"StringEquals": {"aws:RequestedRegion": region}}
        for sid, statement in statements.items():
            actions = statement["Action"]
            actions = actions if isinstance(actions, list) else [actions]
            assert all("*" not in a for a in actions), sid


def test_karpenter_nodes_join_with_one_role_per_cluster(prod_synth: Synth) -> None:
    """IAM is global: the primary region creates the node role, every region gives it an
    EC2_LINUX access entry (EKS docs, "Create access entries": type EC2_LINUX for
    self-managed and Karpenter nodes), and the secondary cluster stack deploys after the
    primary one. The private subnets carry the tag the EC2NodeClasses select."""
    from envspec.names import KARPENTER_DISCOVERY_TAG, karpenter_node_role_name

    env = prod_synth.env
    name = karpenter_node_role_name(env.cluster.name)
    roles = {
        region: [
            r
            for r in prod_synth.resources(region, "cluster", "AWS::IAM::Role").values()
            if r["Properties"].get("RoleName") == name
        ]
        for region in env.aws.regions
    }
    assert len(roles[env.aws.region]) == 1
    assert all(not roles[r] for r in env.aws.secondary_regions)
    for region in env.aws.regions:
        entries = [
            e["Properties"]
            for e in prod_synth.resources(region, "cluster", "AWS::EKS::AccessEntry").values()
            if e["Properties"].get("Type") == "EC2_LINUX"
        ]
        (entry,) = entries
        assert str(entry["PrincipalArn"]).endswith(f":role/{name}']]}}")
        subnets = prod_synth.resources(region, "network", "AWS::EC2::Subnet")
        private = [s for lid, s in subnets.items() if "private" in lid]
        assert private
        for subnet in private:
            tags = {t["Key"]: t["Value"] for t in subnet["Properties"]["Tags"]}
            assert tags[KARPENTER_DISCOVERY_TAG] == env.cluster.name
    primary = prod_synth.stack(env.aws.region, "cluster")
    assert primary in prod_synth.stack(env.aws.secondary_regions[0], "cluster").dependencies
