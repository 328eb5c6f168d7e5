"""Karpenter NodePools and EC2NodeClasses: one of each per GPU node group of the
environment, so Karpenter adds the GPU nodes the model servers' replicas need.

A NodePool launches the node group's instance type (capacity type and zones from
environment.yaml) with the node group's labels and taint, so a model server's node
affinity and toleration (cdk8s/charts/model_servers.py) fit a Karpenter node exactly as a
managed node group's; its `nvidia.com/gpu` limit is the group's `max_size × gpus_per_node`.
It removes a node only when it is empty: a busy GPU node holds live streams.

The EC2NodeClass names the node role the CDK creates (stacks/parts/karpenter.py), the
private subnets it tags `karpenter.sh/discovery: <cluster>` and the cluster security
group (EKS tags it `aws:eks:cluster-name`); IMDSv2 with one hop, so pods cannot borrow
the node's role.
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec
from envspec.infra import NodeGroupSpec
from envspec.names import (
    GPU_TAINT_KEY,
    KARPENTER_DISCOVERY_TAG,
    gpu_labels,
    karpenter_node_role_name,
)

from .base import Wave, labels, manifest

__all__ = ["NodePoolsChart", "node_pool_name"]

KARPENTER_API = "karpenter.sh/v1"
NODE_CLASS_API = "karpenter.k8s.aws/v1"
_CAPACITY = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "reserved"}
#: The EKS-created cluster security group's tag (EKS docs, "Amazon EKS security group
#: requirements and considerations").
CLUSTER_SG_TAG = "aws:eks:cluster-name"


def node_pool_name(group: NodeGroupSpec) -> str:
    return f"gpu-{group.name}"


class NodePoolsChart(Chart):
    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        meta = labels(name="karpenter-nodes", component="capacity")
        for group in env.node_groups:
            name = node_pool_name(group)
            manifest(
                self,
                f"{name}-class",
                api_version=NODE_CLASS_API,
                kind="EC2NodeClass",
                name=name,
                labels=meta,
                wave=Wave.CONTROLLERS,
                body={"spec": _node_class(env, group)},
            )
            manifest(
                self,
                f"{name}-pool",
                api_version=KARPENTER_API,
                kind="NodePool",
                name=name,
                labels=meta,
                wave=Wave.CONTROLLERS,
                body={"spec": _node_pool(group, node_class=name)},
            )


def _node_class(env: EnvironmentSpec, group: NodeGroupSpec) -> dict[str, Any]:
    cluster = env.cluster.name
    return {
        "role": karpenter_node_role_name(cluster),
        "amiSelectorTerms": [{"alias": env.cluster.node_ami}],
        "subnetSelectorTerms": [{"tags": {KARPENTER_DISCOVERY_TAG: cluster}}],
        "securityGroupSelectorTerms": [{"tags": {CLUSTER_SG_TAG: cluster}}],
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "ebs": {
                    "volumeSize": f"{group.disk_size_gib}Gi",
                    "volumeType": "gp3",
                    "encrypted": True,
                    "deleteOnTermination": True,
                },
            }
        ],
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
        "tags": {
            "igw.dev/environment": env.name,
            "igw.dev/node-group": group.name,
            "igw.dev/gpu": group.gpu,
        },
    }


def _node_pool(group: NodeGroupSpec, *, node_class: str) -> dict[str, Any]:
    requirements = [
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": [group.instance_type],
        },
        {
            "key": "karpenter.sh/capacity-type",
            "operator": "In",
            "values": [_CAPACITY[group.capacity_type]],
        },
    ]
    if group.availability_zones:
        # Zones of every region: in each region Karpenter keeps those its subnets are in.
        requirements.append(
            {
                "key": "topology.kubernetes.io/zone",
                "operator": "In",
                "values": sorted(group.availability_zones),
            }
        )
    return {
        "template": {
            "metadata": {"labels": gpu_labels(group)},
            "spec": {
                "nodeClassRef": {
                    "group": NODE_CLASS_API.partition("/")[0],
                    "kind": "EC2NodeClass",
                    "name": node_class,
                },
                "requirements": requirements,
                "taints": [{"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
                "expireAfter": "720h",
            },
        },
        "limits": {"nvidia.com/gpu": group.max_size * group.gpus_per_node},
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "10m",
            "budgets": [{"nodes": "1"}],
        },
    }
