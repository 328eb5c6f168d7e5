"""Karpenter in the rendered tree: GPU NodePools a model server can land on, and the
controller wired to what the CDK builds.

Neither Karpenter nor a scheduler runs here; the rules below are Kubernetes' scheduling
rules (node affinity `In` on node labels, a `NoSchedule` taint tolerated by an `Exists`
toleration of the same key and effect: Kubernetes docs, "Assigning Pods to Nodes",
"Taints and Tolerations") applied to the labels and taints a NodePool puts on its nodes
(Karpenter docs, "NodePools": `spec.template.metadata.labels`, `spec.template.spec.taints`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from charts.app import environment_names
from charts.bootstrap import ADDONS, KARPENTER_VERSION
from envspec.argocd_manifests import cluster_secret
from envspec.environment import load_environment
from envspec.names import KARPENTER_DISCOVERY_TAG, karpenter_node_role_name, karpenter_queue_name

WAVE = "argocd.argoproj.io/sync-wave"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _rendered(gitops_dir: Path, name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((gitops_dir / "environments" / name / "rendered").glob("*.yaml")):
        out += _docs(path)
    return out


def _bootstrap(gitops_dir: Path) -> dict[str, dict[str, Any]]:
    docs = _docs(gitops_dir / "bootstrap" / "inference-gateway.k8s.yaml")
    return {d["kind"] + "/" + d["metadata"]["name"]: d for d in docs}


def _matches(expressions: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    for e in expressions:
        value = labels.get(e["key"])
        if e["operator"] == "In" and value not in e["values"]:
            return False
        if e["operator"] == "Exists" and value is None:
            return False
    return True


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for t in tolerations:
        if t.get("effect", taint["effect"]) != taint["effect"] or t.get("key") != taint["key"]:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value") == taint["value"]:
            return True
    return False


def test_every_model_server_fits_a_gpu_node_pool(gitops_dir: Path) -> None:
    """Each model server's node affinity selects the nodes of its group's NodePool and its
    tolerations admit that NodePool's taints, so Karpenter adds nodes its pending replicas
    can use; the NodePool launches the group's instance type and capacity type, up to the
    group's GPUs (`max_size × gpus_per_node`)."""
    for name in environment_names():
        env = load_environment(name)
        docs = _rendered(gitops_dir, name)
        pools = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NodePool"}
        groups = {g.name: g for g in env.node_groups}
        assert set(pools) == {f"gpu-{g}" for g in groups}
        for group_name, group in groups.items():
            pool = pools[f"gpu-{group_name}"]
            requirements = {r["key"]: r for r in pool["template"]["spec"]["requirements"]}
            assert requirements["node.kubernetes.io/instance-type"]["values"] == [
                group.instance_type
            ]
            assert requirements["karpenter.sh/capacity-type"]["values"] == [
                {"ON_DEMAND": "on-demand", "SPOT": "spot"}[group.capacity_type]
            ]
            assert pool["limits"]["nvidia.com/gpu"] == group.max_size * group.gpus_per_node
            assert pool["disruption"]["consolidationPolicy"] == "WhenEmpty"
            # The managed node groups' taint (stacks/parts/gpu_nodes.py): only pods that
            # tolerate it, the model servers and the device plugin, land on GPU nodes.
            assert pool["template"]["spec"]["taints"] == [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
            ]
        servers = [
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("vllm-")
        ]
        assert servers
        for server in servers:
            pod = server["spec"]["template"]["spec"]
            # Terms are ORed; a HyperPod term (sagemaker.amazonaws.com/... labels) matches
            # no NodePool, Karpenter adds managed-group-like nodes only.
            terms = pod["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            fits = [
                pool_name
                for pool_name, pool in pools.items()
                if any(
                    _matches(t["matchExpressions"], pool["template"]["metadata"]["labels"])
                    for t in terms
                )
                and all(
                    _tolerates(pod["tolerations"], t) for t in pool["template"]["spec"]["taints"]
                )
            ]
            assert len(fits) == 1, (server["metadata"]["name"], fits)


def test_node_classes_name_what_the_cdk_builds(gitops_dir: Path) -> None:
    """The EC2NodeClass's role, subnet tag and security-group tag are the node role the
    CDK creates (stacks/parts/karpenter.py), the tag it puts on the private subnets and
    the tag EKS puts on the cluster security group; IMDSv2 with one hop keeps pods off
    the node role (EC2 docs, "Configure the instance metadata options")."""
    for name in environment_names():
        env = load_environment(name)
        docs = _rendered(gitops_dir, name)
        classes = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "EC2NodeClass"}
        for pool in (d for d in docs if d["kind"] == "NodePool"):
            ref = pool["spec"]["template"]["spec"]["nodeClassRef"]
            assert (ref["group"], ref["kind"]) == ("karpenter.k8s.aws", "EC2NodeClass")
            spec = classes[ref["name"]]
            assert spec["role"] == karpenter_node_role_name(env.cluster.name)
            assert spec["subnetSelectorTerms"] == [
                {"tags": {KARPENTER_DISCOVERY_TAG: env.cluster.name}}
            ]
            assert spec["securityGroupSelectorTerms"] == [
                {"tags": {"aws:eks:cluster-name": env.cluster.name}}
            ]
            assert spec["metadataOptions"]["httpTokens"] == "required"
            assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
            assert all(b["ebs"]["encrypted"] for b in spec["blockDeviceMappings"])


def test_karpenter_controller_is_pinned_and_told_its_cluster_and_queue(gitops_dir: Path) -> None:
    """The controller needs `settings.clusterName` and `settings.interruptionQueue`
    (chart values, Karpenter 1.6): the ApplicationSet reads the cluster's name from the
    label the CDK puts on the cluster Secret, so each cluster gets its own; the CRDs come
    from `karpenter-crd` at the same version, an Application of an earlier wave than the
    environments' NodePools."""
    apps = _bootstrap(gitops_dir)
    appset = apps["ApplicationSet/karpenter"]["spec"]
    (generator,) = appset["generators"]
    (expression,) = generator["clusters"]["selector"]["matchExpressions"]
    secret = cluster_secret("prod", "us-east-1", "igw-prod", target_group_arn="arn:example")
    assert expression["operator"] == "Exists" and expression["key"] in secret["metadata"]["labels"]
    source = appset["template"]["spec"]["source"]
    assert (source["repoURL"], source["chart"]) == ("public.ecr.aws/karpenter", "karpenter")
    assert source["targetRevision"] == KARPENTER_VERSION
    assert source["helm"]["skipCrds"] is True
    params = {p["name"]: p["value"] for p in source["helm"]["parameters"]}
    label = f'{{{{index .metadata.labels "{expression["key"]}"}}}}'
    # What Argo CD's Go template makes of it for the prod cluster's Secret.
    rendered = {
        k: v.replace(label, secret["metadata"]["labels"][expression["key"]])
        for k, v in params.items()
    }
    assert rendered == {
        "settings.clusterName": "igw-prod",
        "settings.interruptionQueue": karpenter_queue_name("igw-prod"),
    }
    assert appset["template"]["spec"]["destination"]["namespace"] == "kube-system"
    (crd,) = [a for a in ADDONS if a.chart == "karpenter-crd"]
    assert crd.version == KARPENTER_VERSION and crd.repo == source["repoURL"]
    crd_wave = int(apps["Application/karpenter-crd"]["metadata"]["annotations"][WAVE])
    env_wave = int(
        apps["ApplicationSet/inference-gateway-environments"]["metadata"]["annotations"][WAVE]
    )
    assert crd_wave < env_wave
    whitelist = apps["AppProject/inference-gateway"]["spec"]["clusterResourceWhitelist"]
    assert {"group": "karpenter.sh", "kind": "NodePool"} in whitelist
    assert {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"} in whitelist
