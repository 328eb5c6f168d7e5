"""The nodes and the pods of one environment's cluster in one region, as the tree says.

Nodes (in the order first fit tries them):

* the system managed node group (`cluster.system_node_group`): `desired_size` nodes,
  label `igw.dev/role=system`, no taint (stacks/parts/eks_cluster.py). Nothing scales it
  (no cluster autoscaler; Karpenter's NodePools are for GPUs only), so desired is what
  runs;
* each GPU managed node group built in the region (stacks/placement.py): `desired_size`
  nodes with the group's labels and the `nvidia.com/gpu=true:NoSchedule` taint
  (stacks/parts/gpu_nodes.py);
* each rendered Karpenter NodePool (gitops/environments/<env>/rendered/15-node-pools):
  as many nodes of its instance type as its `nvidia.com/gpu` limit allows, with its
  template's labels and taints, in its zones that the region's VPC spans;
* HyperPod's instance groups, in the primary region where HyperPod is enabled: labels
  as HyperPod sets them (docs/infrastructure.md "HyperPod"), no taint.

Pods: every Deployment, StatefulSet and DaemonSet of the environment's `rendered/`,
`monitoring/` and `global/<region>/` (a KEDA ScaledObject's target at its
`minReplicaCount` at rest, `maxReplicaCount` at peak), the Envoy fleet Envoy Gateway
creates for each Gateway from its EnvoyProxy, and the add-ons' pods (addon_pods.py).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envspec.environment import ENVIRONMENTS_DIR, EnvironmentSpec
from envspec.names import GPU_TAINT_KEY, gpu_labels
from stacks.placement import RegionPlan

from .addon_pods import AddOn
from .eks_nodes import INSTANCE_TYPES, allocatable
from .scheduling import Node, Placement, Pod

__all__ = [
    "ENVOY_DEFAULTS",
    "NodeGroup",
    "TreeWorkload",
    "addon_workloads",
    "alb_controller_version",
    "bootstrap_addons",
    "node_groups",
    "place",
    "tree_workloads",
]

Obj = dict[str, Any]
REPO_ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = REPO_ROOT / "gitops" / "bootstrap"

#: Envoy Gateway v1.5.0 `api/v1alpha1/shared_types.go`: the Envoy container's and the
#: shutdown manager's default requests, one replica by default.
ENVOY_DEFAULTS = {
    "envoy": {"requests": {"cpu": "100m", "memory": "512Mi"}},
    "shutdown-manager": {"requests": {"cpu": "10m", "memory": "32Mi"}},
}
#: The labels Envoy Gateway v1.5.0 puts on Envoy's pods
#: (`internal/infrastructure/kubernetes/proxy/resource.go: EnvoyAppLabel`, the owning
#: gateway's labels from `internal/gatewayapi/translator.go`).
ENVOY_APP_LABELS = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
}
OWNING_GATEWAY_NAME = "gateway.envoyproxy.io/owning-gateway-name"
OWNING_GATEWAY_NAMESPACE = "gateway.envoyproxy.io/owning-gateway-namespace"


@dataclass(frozen=True)
class NodeGroup:
    name: str
    instance_type: str
    count: int
    zones: tuple[str, ...]
    labels: Mapping[str, str]
    taints: tuple[Obj, ...] = ()

    def describe(self) -> str:
        return f"{self.name} ({self.count} x {self.instance_type})"

    def nodes(self) -> list[Node]:
        capacity = allocatable(self.instance_type)
        out = []
        for i in range(self.count):
            name = f"{self.name}-{i}"
            labels = {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": self.instance_type,
                "topology.kubernetes.io/zone": self.zones[i % len(self.zones)],
                **self.labels,
            }
            out.append(Node(name, self.describe(), labels, self.taints, capacity))
        return out


@dataclass(frozen=True)
class TreeWorkload:
    """One pod template and how many of it run at rest and at peak."""

    kind: str
    namespace: str
    name: str
    template: Obj
    rest: int
    peak: int
    surge: int = 0

    @property
    def owner(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


#: libyaml's loader where PyYAML was built with it: the trees are read several times.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=32)
def _folder(folder: Path) -> tuple[Obj, ...]:
    return tuple(
        d
        for path in sorted(folder.glob("*.yaml"))
        for d in yaml.load_all(path.read_text(), Loader=_LOADER)
        if d
    )


def _docs(folder: Path) -> Iterator[Obj]:
    """The objects of a folder's files (parsed once; callers must not change them)."""
    yield from _folder(folder)


def _surge(spec: Obj, replicas: int) -> int:
    """Extra pods a rolling update starts (`maxSurge`, default 25 %, rounded up)."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    value = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(replicas * int(value[:-1]) / 100)
    return int(value)


def tree_workloads(
    env: EnvironmentSpec, region: str, root: Path = ENVIRONMENTS_DIR
) -> list[TreeWorkload]:
    """The environment's own pods in `region`'s cluster, from its committed folders."""
    base = root / env.name
    docs = [
        *_docs(base / "rendered"),
        *_docs(base / "monitoring"),
        *_docs(base / "global" / region),
    ]
    scaled = {
        (d["metadata"]["namespace"], d["spec"]["scaleTargetRef"]["name"]): (
            int(d["spec"].get("minReplicaCount", 0)),
            int(d["spec"].get("maxReplicaCount", 100)),
        )
        for d in docs
        if d["kind"] == "ScaledObject"
    }
    out = []
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet", "DaemonSet"):
            continue
        meta, spec = d["metadata"], d["spec"]
        namespace = meta.get("namespace", "default")
        rest = peak = int(spec.get("replicas", 1))
        if (namespace, meta["name"]) in scaled:
            rest, peak = scaled[(namespace, meta["name"])]
        surge = _surge(spec, rest) if d["kind"] == "Deployment" and rest else 0
        out.append(
            TreeWorkload(d["kind"], namespace, meta["name"], spec["template"], rest, peak, surge)
        )
    return out + _envoy_fleets(env, docs)


def _envoy_fleets(env: EnvironmentSpec, docs: Sequence[Obj]) -> list[TreeWorkload]:
    """The Envoy Deployment Envoy Gateway runs for each Gateway, from its EnvoyProxy
    (the Gateway's own `infrastructure.parametersRef`, else its class's), in the
    controller's namespace (the default, non gateway-namespace mode)."""
    proxies = {
        (d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] == "EnvoyProxy"
    }
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "GatewayClass"}
    out = []
    for gateway in (d for d in docs if d["kind"] == "Gateway"):
        gw_meta = gateway["metadata"]
        gateway_class = classes[gateway["spec"]["gatewayClassName"]]
        ref = (gateway["spec"].get("infrastructure") or {}).get("parametersRef") or gateway_class[
            "spec"
        ].get("parametersRef")
        proxy = proxies.get((ref.get("namespace"), ref["name"])) if ref else None
        kubernetes = ((proxy or {}).get("spec", {}).get("provider") or {}).get("kubernetes") or {}
        if kubernetes.get("envoyDaemonSet") is not None:
            kind, deployment = "DaemonSet", kubernetes["envoyDaemonSet"]
        else:
            kind, deployment = "Deployment", kubernetes.get("envoyDeployment") or {}
        hpa = kubernetes.get("envoyHpa")
        replicas = int(deployment.get("replicas", 1))
        rest, peak = (
            (hpa.get("minReplicas", 1), hpa["maxReplicas"]) if hpa else (replicas, replicas)
        )
        pod = deployment.get("pod") or {}
        container = deployment.get("container") or {}
        labels = {
            **ENVOY_APP_LABELS,
            OWNING_GATEWAY_NAME: gw_meta["name"],
            OWNING_GATEWAY_NAMESPACE: gw_meta.get("namespace", "default"),
            **(pod.get("labels") or {}),
        }
        template = {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "envoy",
                        "resources": container.get("resources") or ENVOY_DEFAULTS["envoy"],
                    },
                    {"name": "shutdown-manager", "resources": ENVOY_DEFAULTS["shutdown-manager"]},
                    # Envoy AI Gateway v0.4.0's webhook adds its extproc container with the
                    # resources of an AIGatewayRoute's filterConfig (`internal/controller/
                    # gateway_mutator.go`); this tree has none: no requests.
                    {"name": "ai-gateway-extproc"},
                ],
                **{
                    k: pod[k]
                    for k in (
                        "affinity",
                        "tolerations",
                        "nodeSelector",
                        "topologySpreadConstraints",
                    )
                    if k in pod
                },
            },
        }
        out.append(
            TreeWorkload(
                kind,
                env.kubernetes.envoy_gateway_namespace,
                f"envoy-{gw_meta.get('namespace', 'default')}-{gw_meta['name']}",
                template,
                rest,
                peak,
                surge=_surge(deployment, rest) if kind == "Deployment" else 0,
            )
        )
    return out


def addon_workloads(addons: Sequence[AddOn]) -> list[TreeWorkload]:
    return [
        TreeWorkload(w.kind, w.namespace, w.name, w.pod_template(), w.replicas, w.replicas)
        for addon in addons
        for w in addon.workloads
    ]


def _node_pools(env: EnvironmentSpec, plan: RegionPlan) -> list[NodeGroup]:
    out = []
    for d in _docs(ENVIRONMENTS_DIR / env.name / "rendered"):
        if d["kind"] != "NodePool":
            continue
        template = d["spec"]["template"]
        requirements = {r["key"]: r for r in template["spec"].get("requirements", [])}
        types = requirements["node.kubernetes.io/instance-type"]["values"]
        if len(types) != 1:
            raise NotImplementedError(f"NodePool {d['metadata']['name']}: one instance type")
        gpus = INSTANCE_TYPES[types[0]].gpus if types[0] in INSTANCE_TYPES else 0
        limit = (d["spec"].get("limits") or {}).get("nvidia.com/gpu")
        if limit is None or not gpus:
            raise AssertionError(
                f"NodePool {d['metadata']['name']}: no nvidia.com/gpu limit on a GPU type; "
                "an unbounded pool cannot be sized"
            )
        zones = plan.availability_zones
        if "topology.kubernetes.io/zone" in requirements:
            wanted = requirements["topology.kubernetes.io/zone"]["values"]
            zones = tuple(z for z in plan.availability_zones if z in wanted)
        if not zones:
            continue  # no subnet of this region in the pool's zones: Karpenter launches none
        out.append(
            NodeGroup(
                d["metadata"]["name"],
                types[0],
                int(limit) // gpus,
                zones,
                {
                    **template["metadata"].get("labels", {}),
                    "karpenter.sh/nodepool": d["metadata"]["name"],
                },
                tuple(template["spec"].get("taints", [])),
            )
        )
    return out


def node_groups(env: EnvironmentSpec, plan: RegionPlan) -> list[NodeGroup]:
    """The region's node groups, system first, then GPU groups, Karpenter, HyperPod."""
    system = env.cluster.system_node_group
    groups = [
        NodeGroup(
            "system",
            system.instance_type,
            system.desired_size,
            plan.availability_zones,
            {
                "igw.dev/role": "system",
                "eks.amazonaws.com/nodegroup": f"{env.cluster.name}-system",
            },
        )
    ]
    for group in plan.node_groups:
        groups.append(
            NodeGroup(
                group.name,
                group.instance_type,
                group.desired_size,
                plan.node_group_zones[group.name],
                {
                    **gpu_labels(group),
                    "eks.amazonaws.com/nodegroup": f"{env.cluster.name}-{group.name}",
                },
                ({"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"},),
            )
        )
    groups += _node_pools(env, plan)
    hyperpod = env.cluster.hyperpod
    if plan.hyperpod and hyperpod.enabled:
        for ig in hyperpod.instance_groups:
            groups.append(
                NodeGroup(
                    ig.name,
                    ig.instance_type,
                    ig.instance_count,
                    plan.hyperpod_zones,
                    {
                        "sagemaker.amazonaws.com/compute-type": "hyperpod",
                        "sagemaker.amazonaws.com/instance-group-name": ig.name,
                        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
                    },
                )
            )
    return [g for g in groups if g.count > 0]


def place(
    groups: Sequence[NodeGroup],
    workloads: Sequence[TreeWorkload],
    *,
    peak: bool = False,
    surge_of: str | None = None,
) -> Placement:
    """DaemonSets on every node they select, then everything else, first fit decreasing.
    `surge_of`: the owner whose rolling update's extra pods are added."""
    placement = Placement([n for g in groups for n in g.nodes()])
    for w in workloads:
        if w.kind == "DaemonSet":
            targets = placement.daemon_nodes(w.template.get("spec") or {})
            placement.place_daemonset(
                (node, Pod.from_template(f"{w.owner} on {node.name}", 0, w.namespace, w.template))
                for node in targets
            )
    pods = []
    for w in workloads:
        if w.kind == "DaemonSet":
            continue
        count = (w.peak if peak else w.rest) + (w.surge if w.owner == surge_of else 0)
        pods += [Pod.from_template(w.owner, i, w.namespace, w.template) for i in range(count)]
    placement.place(pods)
    return placement


_ALB = re.compile(r"AlbControllerVersion\.V(\d+)_(\d+)_(\d+)")


def alb_controller_version() -> str:
    """The AWS Load Balancer Controller version the cluster stack installs."""
    text = (REPO_ROOT / "stacks" / "parts" / "eks_cluster.py").read_text()
    match = _ALB.search(text)
    assert match, "stacks/parts/eks_cluster.py names no AlbControllerVersion"
    return "v" + ".".join(match.groups())


def bootstrap_addons(repo_url: str) -> dict[str, tuple[str, Obj]]:
    """Add-on name -> (pinned version, Helm values) of every upstream chart Argo CD
    installs, from the committed gitops/bootstrap (Applications and ApplicationSets;
    those of this repository, `repo_url`, are the tree's own folders)."""
    out: dict[str, tuple[str, Obj]] = {}
    for d in _docs(BOOTSTRAP):
        if d["kind"] not in ("Application", "ApplicationSet"):
            continue
        spec = d["spec"] if d["kind"] == "Application" else d["spec"]["template"]["spec"]
        source = spec.get("source") or {}
        if source.get("repoURL") == repo_url:
            continue
        helm = source.get("helm") or {}
        values = yaml.safe_load(helm.get("values", "")) or {}
        out[d["metadata"]["name"]] = (source["targetRevision"], values)
    return out
