"""The cluster stack: EKS, GPU node groups per generation and zone, add-ons (HyperPod:
test_stacks_hyperpod.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aws_cdk.assertions import Match

if TYPE_CHECKING:
    from conftest import Synth

PRIMARY, SECONDARY = "us-east-1", "us-west-2"
GPU_TAINT = [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}]


def _private_subnets(synth: Synth, region: str, zones: list[str]) -> list[dict[str, str]]:
    """ImportValue references of the network stack's private subnets in `zones`."""
    network = synth.raw(region, "network")["Resources"]
    by_zone = {
        res["Properties"]["AvailabilityZone"]: logical_id
        for logical_id, res in network.items()
        if res["Type"] == "AWS::EC2::Subnet" and "private" in logical_id
    }
    outputs = synth.raw(region, "network")["Outputs"]
    refs = []
    for zone in zones:
        export = next(
            o["Export"]["Name"] for o in outputs.values() if o["Value"] == {"Ref": by_zone[zone]}
        )
        refs.append({"Fn::ImportValue": export})
    return refs


def test_eks_cluster_is_private_logged_encrypted_and_uses_access_entries(
    any_synth: Synth,
) -> None:
    for region in any_synth.env.aws.regions:
        any_synth.template(region, "cluster").has_resource_properties(
            "AWS::EKS::Cluster",
            {
                "Name": any_synth.env.cluster.name,
                "Version": "1.32",
                "AccessConfig": {"AuthenticationMode": "API"},
                "ResourcesVpcConfig": Match.object_like(
                    {"EndpointPrivateAccess": True, "EndpointPublicAccess": False}
                ),
                "EncryptionConfig": [Match.object_like({"Resources": ["secrets"]})],
                "Logging": {
                    "ClusterLogging": {
                        "EnabledTypes": [
                            {"Type": t}
                            for t in (
                                "api",
                                "audit",
                                "authenticator",
                                "controllerManager",
                                "scheduler",
                            )
                        ]
                    }
                },
            },
        )


def test_admin_role_gets_a_cluster_admin_access_entry(prod_synth: Synth) -> None:
    prod_synth.template(PRIMARY, "cluster").has_resource_properties(
        "AWS::EKS::AccessEntry",
        {
            "PrincipalArn": "arn:aws:iam::222222222222:role/platform-admin",
            "AccessPolicies": [
                {
                    "AccessScope": {"Type": "cluster"},
                    "PolicyArn": {
                        "Fn::Join": [
                            "",
                            Match.array_with(
                                [Match.string_like_regexp("/AmazonEKSClusterAdminPolicy$")]
                            ),
                        ]
                    },
                }
            ],
        },
    )


def test_prod_h100_group_p5_nvidia_ami_labels_taint_and_listed_zones_only(
    prod_synth: Synth,
) -> None:
    for region, zones in ((PRIMARY, ["us-east-1a", "us-east-1b"]), (SECONDARY, ["us-west-2b"])):
        prod_synth.template(region, "cluster").has_resource_properties(
            "AWS::EKS::Nodegroup",
            {
                "NodegroupName": "igw-prod-h100",
                "InstanceTypes": ["p5.48xlarge"],
                "AmiType": "AL2023_x86_64_NVIDIA",
                "CapacityType": "ON_DEMAND",
                "Labels": {
                    "igw.dev/node-group": "h100",
                    "igw.dev/gpu": "H100",
                    "igw.dev/gpus-per-node": "8",
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                },
                "Taints": GPU_TAINT,
                "Subnets": _private_subnets(prod_synth, region, zones),
                "ScalingConfig": {"MinSize": 0, "MaxSize": 4, "DesiredSize": 1},
            },
        )


def test_prod_a10g_group_g5_in_every_zone_of_both_regions(prod_synth: Synth) -> None:
    for region in (PRIMARY, SECONDARY):
        zones = [f"{region}{z}" for z in "abc"]
        prod_synth.template(region, "cluster").has_resource_properties(
            "AWS::EKS::Nodegroup",
            {
                "NodegroupName": "igw-prod-a10g",
                "InstanceTypes": ["g5.2xlarge"],
                "AmiType": "AL2023_x86_64_NVIDIA",
                "Labels": Match.object_like(
                    {"igw.dev/gpu": "A10G", "nvidia.com/gpu.product": "NVIDIA-A10G"}
                ),
                "Taints": GPU_TAINT,
                "Subnets": _private_subnets(prod_synth, region, zones),
            },
        )
        # system + h100 + a10g in each region
        prod_synth.template(region, "cluster").resource_count_is("AWS::EKS::Nodegroup", 3)


def test_dev_has_one_a10g_group_and_an_untainted_system_group(dev_synth: Synth) -> None:
    template = dev_synth.template(PRIMARY, "cluster")
    template.resource_count_is("AWS::EKS::Nodegroup", 2)
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "NodegroupName": "igw-dev-a10g",
            "InstanceTypes": ["g5.2xlarge"],
            "AmiType": "AL2023_x86_64_NVIDIA",
            "Taints": GPU_TAINT,
            "Subnets": _private_subnets(dev_synth, PRIMARY, ["us-east-1a", "us-east-1b"]),
        },
    )
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "NodegroupName": "igw-dev-system",
            "AmiType": "AL2023_x86_64_STANDARD",
            "Labels": {"igw.dev/role": "system"},
            "Taints": Match.absent(),
        },
    )


def test_dev_gpu_group_starts_empty_and_system_group_holds_the_system_pods(
    dev_synth: Synth,
) -> None:
    """Scale to zero gives GPUs back only if the managed group holds none: EKS keeps
    `DesiredSize` nodes until the Cluster Autoscaler (not run here) changes it (EKS API
    Reference, NodegroupScalingConfig); Karpenter's NodePool adds and removes the rest.
    The system group is the size tests/gitops/test_gitops_schedule.py proved fits."""
    template = dev_synth.template(PRIMARY, "cluster")
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "NodegroupName": "igw-dev-a10g",
            "ScalingConfig": {"MinSize": 0, "MaxSize": 4, "DesiredSize": 0},
        },
    )
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "NodegroupName": "igw-dev-system",
            "InstanceTypes": ["m6i.xlarge"],
            "ScalingConfig": {"MinSize": 2, "MaxSize": 4, "DesiredSize": 2},
        },
    )


def test_addons_installed_in_dependency_order(any_synth: Synth) -> None:
    addons = any_synth.resources(PRIMARY, "cluster", "AWS::EKS::Addon")
    by_name = {res["Properties"]["AddonName"]: (lid, res) for lid, res in addons.items()}
    assert set(by_name) == {
        "vpc-cni",
        "kube-proxy",
        "coredns",
        "eks-pod-identity-agent",
        "amazon-cloudwatch-observability",
    }
    cloudwatch_deps = by_name["amazon-cloudwatch-observability"][1].get("DependsOn", [])
    assert by_name["eks-pod-identity-agent"][0] in cloudwatch_deps
    assert by_name["coredns"][0] in cloudwatch_deps
    assert by_name["vpc-cni"][0] in by_name["coredns"][1]["DependsOn"]


def test_vpc_cni_enforces_network_policies(any_synth: Synth) -> None:
    """EKS enforces NetworkPolicies only when the vpc-cni add-on's configuration sets
    `enableNetworkPolicy: "true"` (EKS docs, "Restrict pod network traffic with
    Kubernetes network policies"); otherwise the rendered policies are accepted and
    ignored."""
    addons = any_synth.resources(PRIMARY, "cluster", "AWS::EKS::Addon")
    (vpc_cni,) = [a for a in addons.values() if a["Properties"]["AddonName"] == "vpc-cni"]
    configuration = json.loads(vpc_cni["Properties"]["ConfigurationValues"])
    assert configuration["enableNetworkPolicy"] == "true"


def test_cloudwatch_agent_addon_starts_after_its_pod_identity_association(
    any_synth: Synth,
) -> None:
    """The agent reads its credentials when it starts; an add-on created before its Pod
    Identity association runs without a role until restarted (EKS docs, "Assign an IAM
    role to a Kubernetes service account": pods pick up an association only when they
    are created). So the add-on depends on the association, which names this cluster."""
    for region in any_synth.env.aws.regions:
        resources = any_synth.raw(region, "cluster")["Resources"]
        (association_id,) = [
            lid
            for lid, r in resources.items()
            if r["Type"] == "AWS::EKS::PodIdentityAssociation"
            and r["Properties"]["ServiceAccount"] == "cloudwatch-agent"
        ]
        association = resources[association_id]["Properties"]
        assert association["Namespace"] == "amazon-cloudwatch"
        assert association["ClusterName"] == any_synth.env.cluster.name
        (agent,) = [
            r
            for r in resources.values()
            if r["Type"] == "AWS::EKS::Addon"
            and r["Properties"]["AddonName"] == "amazon-cloudwatch-observability"
        ]
        assert association_id in agent["DependsOn"]
        cluster_ids = [lid for lid, r in resources.items() if r["Type"] == "AWS::EKS::Cluster"]
        assert set(cluster_ids) <= set(resources[association_id]["DependsOn"])
