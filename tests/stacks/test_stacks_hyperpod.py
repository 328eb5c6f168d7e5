"""SageMaker HyperPod on in prod: the cluster, its execution role, the wait for its Helm
chart, and a model server that can be placed on its nodes.

Sources: SageMaker AI developer guide, "IAM role for SageMaker HyperPod" (the execution
role's statements for Amazon EKS orchestration), "Installing packages on the Amazon EKS
cluster using Helm" (required before `CreateCluster`; namespace `aws-hyperpod`), and
"Resilience-related Kubernetes labels by SageMaker HyperPod" (`node-health-status`);
the labels every HyperPod node carries, `sagemaker.amazonaws.com/compute-type: hyperpod`
and `sagemaker.amazonaws.com/instance-group-name: <group>`, are HyperPod's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from aws_cdk.assertions import Match

if TYPE_CHECKING:
    from conftest import Synth

PRIMARY, SECONDARY = "us-east-1", "us-west-2"
ROOT = Path(__file__).resolve().parents[2]
OBJECT_VALUE = "Custom::AWSCDK-EKS-KubernetesObjectValue"


def _one(synth: Synth, region: str, part: str, kind: str) -> tuple[str, dict[str, Any]]:
    ((name, resource),) = synth.resources(region, part, kind).items()
    return str(name), dict(resource)


def test_prod_synthesises_a_hyperpod_cluster_orchestrated_by_its_eks_cluster(
    prod_synth: Synth,
) -> None:
    template = prod_synth.template(PRIMARY, "gitops")
    template.has_resource_properties(
        "AWS::SageMaker::Cluster",
        {
            "ClusterName": "igw-prod-hyperpod",
            "NodeRecovery": "Automatic",
            "InstanceGroups": [
                Match.object_like(
                    {
                        "InstanceGroupName": "h100-hyperpod",
                        "InstanceType": "ml.p5.48xlarge",
                        "InstanceCount": 2,
                        "LifeCycleConfig": Match.object_like({"OnCreate": "on_create.sh"}),
                    }
                )
            ],
        },
    )
    _, hyperpod = _one(prod_synth, PRIMARY, "gitops", "AWS::SageMaker::Cluster")
    # Orchestrator.Eks names this region's EKS cluster (the cluster stack's export).
    cluster_arn = hyperpod["Properties"]["Orchestrator"]["Eks"]["ClusterArn"]["Fn::ImportValue"]
    assert cluster_arn.startswith(f"igw-prod-{PRIMARY}-cluster:")
    (cluster_id,) = prod_synth.resources(PRIMARY, "cluster", "AWS::EKS::Cluster")
    assert f"GetAtt{cluster_id}Arn" in cluster_arn
    # in the private subnets of the zones the environment lists, on the cluster SG
    vpc = hyperpod["Properties"]["VpcConfig"]
    assert len(vpc["Subnets"]) == len(prod_synth.env.cluster.hyperpod.availability_zones)
    (group,) = vpc["SecurityGroupIds"]
    assert "ClusterSecurityGroupId" in group["Fn::ImportValue"]


def test_hyperpod_only_where_enabled_and_only_in_the_primary_region(
    dev_synth: Synth, prod_synth: Synth
) -> None:
    for part in ("cluster", "gitops"):
        dev_synth.template(PRIMARY, part).resource_count_is("AWS::SageMaker::Cluster", 0)
        prod_synth.template(SECONDARY, part).resource_count_is("AWS::SageMaker::Cluster", 0)
    prod_synth.template(PRIMARY, "cluster").resource_count_is("AWS::SageMaker::Cluster", 0)


def test_execution_role_has_what_eks_orchestration_needs(prod_synth: Synth) -> None:
    """AWS's list for an EKS-orchestrated execution role: the managed instance-role
    policy, the Amazon VPC CNI's ENI actions, ECR pulls and the Pod Identity agent's
    `eks-auth:AssumeRoleForPodIdentity`, here on this cluster only."""
    template = prod_synth.template(PRIMARY, "gitops")
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": Match.object_like(
                {
                    "Statement": [
                        Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})
                    ]
                }
            ),
            "ManagedPolicyArns": [
                Match.object_like(
                    {"Fn::Join": ["", Match.array_with([Match.string_like_regexp(
                        "AmazonSageMakerClusterInstanceRolePolicy")])]}
                )
            ],
        },
    )  # fmt: skip
    policies = [
        p
        for name, p in prod_synth.resources(PRIMARY, "gitops", "AWS::IAM::Policy").items()
        if name.startswith("HyperPodExecutionRole")
    ]
    (policy,) = policies
    statements = {s.get("Sid"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    cni = set(statements["VpcCni"]["Action"])
    assert {
        "ec2:AssignPrivateIpAddresses",
        "ec2:CreateNetworkInterface",
        "ec2:DeleteNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DetachNetworkInterface",
        "ec2:UnassignPrivateIpAddresses",
    } <= cni
    assert set(statements["ImagePulls"]["Action"]) == {
        "ecr:BatchGetImage",
        "ecr:GetAuthorizationToken",
        "ecr:GetDownloadUrlForLayer",
    }
    tag = statements["TagNetworkInterfaces"]
    assert tag["Action"] == "ec2:CreateTags"
    assert json.dumps(tag["Resource"]).endswith(':network-interface/*"]]}')
    identity = statements["PodIdentity"]
    assert identity["Action"] == "eks-auth:AssumeRoleForPodIdentity"
    assert "InferenceCluster" in identity["Resource"]["Fn::ImportValue"]


def test_hyperpod_cluster_waits_for_its_helm_dependencies(prod_synth: Synth) -> None:
    """AWS: HyperPod's Helm chart must be on the EKS cluster before `CreateCluster`.
    Argo CD installs it (the root Application's `hyperpod-dependencies`
    ApplicationSet, for the cluster Secret labelled `igw.dev/hyperpod: enabled`); the
    HyperPod cluster depends on a read of the chart's health-monitoring agent
    DaemonSet in `aws-hyperpod`, which waits until Argo CD has created it."""
    raw = prod_synth.raw(PRIMARY, "gitops")["Resources"]
    gate_id, gate = _one(prod_synth, PRIMARY, "gitops", OBJECT_VALUE)
    props = gate["Properties"]
    assert (props["ObjectType"], props["ObjectName"], props["ObjectNamespace"]) == (
        "daemonset",
        "health-monitoring-agent",
        "aws-hyperpod",
    )
    _, hyperpod = _one(prod_synth, PRIMARY, "gitops", "AWS::SageMaker::Cluster")
    assert gate_id in hyperpod["DependsOn"]
    root = next(n for n in raw if n.startswith("ArgoCdRootApplication"))
    secret = next(n for n in raw if n.startswith("ArgoCdInClusterSecret"))
    assert {root, secret} <= set(gate["DependsOn"])
    labels = prod_synth.manifests(PRIMARY, "gitops")[secret][0]["metadata"]["labels"]
    assert labels["igw.dev/hyperpod"] == "enabled"
    secondary = prod_synth.manifests(SECONDARY, "gitops")
    other = next(v for n, v in secondary.items() if n.startswith("ArgoCdInClusterSecret"))
    assert "igw.dev/hyperpod" not in other[0]["metadata"]["labels"]


def _matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    """A nodeSelectorTerm (its matchExpressions ANDed) against a node's labels."""
    for expression in term.get("matchExpressions", []):
        value = labels.get(expression["key"])
        operator = expression["operator"]
        if operator == "In" and value not in expression["values"]:
            return False
        if operator == "NotIn" and value in expression["values"]:
            return False
        if operator == "Exists" and value is None:
            return False
        if operator == "DoesNotExist" and value is not None:
            return False
    return True


def _placeable(deployment: dict[str, Any], labels: dict[str, str], gpus: int) -> bool:
    """Would the scheduler accept this node for the Deployment's pods: one of its
    required node-affinity terms matches (terms are ORed) and its GPU request fits."""
    pod = deployment["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    wanted = sum(int(c["resources"]["limits"].get("nvidia.com/gpu", 0)) for c in pod["containers"])
    return any(_matches(t, labels) for t in terms) and wanted <= gpus


def test_a_model_server_can_be_placed_on_the_hyperpod_nodes(prod_synth: Synth) -> None:
    """The rendered prod tree against the nodes the synthesised HyperPod cluster makes:
    a node of each instance group carries HyperPod's labels (compute type, its group's
    name, `node.kubernetes.io/instance-type`, health `Schedulable`) and none of the
    managed groups' `igw.dev/*` labels. The h100 pool's model server fits it (8 H100 on
    ml.p5.48xlarge, as on the managed p5.48xlarge); none fits an unhealthy one."""
    _, hyperpod = _one(prod_synth, PRIMARY, "gitops", "AWS::SageMaker::Cluster")
    rendered = ROOT / "gitops/environments/prod/rendered/60-model-servers.k8s.yaml"
    deployments = [
        d for d in yaml.safe_load_all(rendered.read_text()) if d and d["kind"] == "Deployment"
    ]
    gpus_per_node = {g.gpu: g.gpus_per_node for g in prod_synth.env.node_groups}
    spec_groups = {g.name: g for g in prod_synth.env.cluster.hyperpod.instance_groups}
    for group in hyperpod["Properties"]["InstanceGroups"]:
        name = group["InstanceGroupName"]
        gpu = spec_groups[name].gpu
        assert gpu is not None
        node = {
            "sagemaker.amazonaws.com/compute-type": "hyperpod",
            "sagemaker.amazonaws.com/instance-group-name": name,
            "sagemaker.amazonaws.com/node-health-status": "Schedulable",
            "node.kubernetes.io/instance-type": group["InstanceType"],
        }
        fits = [
            d["metadata"]["name"] for d in deployments if _placeable(d, node, gpus_per_node[gpu])
        ]
        # the model servers of the H100 pools, aggregated and P/D alike, and only those
        h100_servers = [
            d["metadata"]["name"]
            for d in deployments
            if d["spec"]["template"]["metadata"]["labels"].get("igw.dev/gpu") == gpu
        ]
        assert "vllm-llama-8b-h100" in h100_servers and len(h100_servers) == 3
        assert fits == h100_servers, (name, fits)
        sick = {**node, "sagemaker.amazonaws.com/node-health-status": "Unschedulable"}
        assert not [d for d in deployments if _placeable(d, sick, gpus_per_node[gpu])]
    # and the same server still lands on the managed h100 group
    managed = {"igw.dev/gpu": "H100", "igw.dev/node-group": "h100"}
    h100 = next(d for d in deployments if d["metadata"]["name"] == "vllm-llama-8b-h100")
    assert _placeable(h100, managed, gpus_per_node["H100"])


def test_every_kubectl_provider_wait_ends_inside_the_providers_lambda(any_synth: Synth) -> None:
    """Issue 30 item 7. CDK's kubectl provider runs every Helm install (`helm upgrade
    --wait --timeout`) and every `KubernetesObjectValue` wait (the `wait_for_output`
    loop) inside one Lambda invocation, whose timeout is 15 minutes (aws-cdk-lib 2.275.0
    `aws-eks-v2/lib/kubectl-provider.js`; `custom-resource-handlers/dist/aws-eks-v2/
    kubectl-handler/get/__init__.py`, `helm/__init__.py`). The HyperPod chart wait of 30
    minutes and Argo CD's install with a 15-minute Helm timeout were cut off by Lambda
    ("Task timed out") instead of ending on their own message. Every wait this tree sets
    must end with time to spare for `aws eks update-kubeconfig` and the last kubectl call:
    two minutes under the handler's timeout, read from the synthesised template. (CDK's
    own install of the AWS Load Balancer Controller waits 15 minutes, `alb-controller.js`,
    at the cap CDK puts on every Helm chart, `HelmChartTimeoutCannotHigher`; it is not
    this tree's to set.)"""
    limits = []
    for path in any_synth.templates:
        resources = json.loads(path.read_text())["Resources"]
        for resource in resources.values():
            props = resource["Properties"]
            if resource["Type"] == "AWS::Lambda::Function" and "kubectl resource provider" in str(
                props.get("Description")
            ):
                limits.append(props["Timeout"])
    assert limits and set(limits) == {900}, limits
    waits = []
    for path in any_synth.templates:
        for name, resource in json.loads(path.read_text())["Resources"].items():
            props = resource["Properties"]
            ours = props.get("Chart") != "aws-load-balancer-controller"
            if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart" and props.get("Wait") and ours:
                waits.append((name, int(props["Timeout"].removesuffix("s"))))
            if resource["Type"] == OBJECT_VALUE:
                waits.append((name, int(props["TimeoutSeconds"])))
    assert waits
    for name, seconds in waits:
        assert seconds <= limits[0] - 120, f"{name} waits {seconds} s inside a {limits[0]} s Lambda"
