"""Will it schedule: every pod of every environment's cluster gets a node.

For each environment and region, the rendered pods (Deployments × replicas,
StatefulSets, DaemonSets on every node they select), the Envoy fleet, and the cluster
add-ons' pods with their charts' default requests (addon_pods.py, each with the chart
version and file it was read from) are placed by first fit decreasing (scheduling.py,
a model of kube-scheduler's filters) on the node groups the tree defines
(cluster_capacity.py), each node offering the EKS AMI's allocatable for its instance
type (eks_nodes.py: awslabs/amazon-eks-ami nodeadm's kube-reserved, eviction threshold
and ENI-based maxPods). Three moments:

* at rest: managed node groups at `desired_size`, KEDA targets at `minReplicaCount`;
* at peak: KEDA targets at `maxReplicaCount` (Karpenter adding GPU nodes up to its
  NodePools' limits; the system group still does not grow);
* during a rollout: at rest plus the `maxSurge` pods of one Deployment at a time
  (Argo CD rolls a changed Deployment; a surge pod that cannot schedule stalls it).

A failure names the pod, the node group it may run on and what each node lacks.
"""

from __future__ import annotations

import pytest

from charts.app import environment_names
from envspec.environment import EnvironmentSpec, load_environment
from envspec.infra import SystemNodeGroupSpec
from stacks.parts.addons import CloudWatchObservabilityAddOn, default_addons
from stacks.placement import plan_regions

from .addon_pods import AddOn, addon_inventory
from .cluster_capacity import (
    addon_workloads,
    alb_controller_version,
    bootstrap_addons,
    node_groups,
    place,
    tree_workloads,
)
from .eks_nodes import MI, allocatable, kube_reserved_cpu_m
from .scheduling import summary

#: stacks/parts/argocd.py installs Argo CD with `global.nodeSelector` on the system nodes.
ARGOCD_NODE_SELECTOR = {"igw.dev/role": "system"}


def _installed(env: EnvironmentSpec, *, primary: bool) -> dict[str, str | None]:
    """Add-on name -> the version the tree pins (None: EKS's default) in one region."""
    out: dict[str, str | None] = {a.name: None for a in default_addons()}
    out["aws-load-balancer-controller"] = alb_controller_version()
    out["argo-cd"] = env.gitops.argocd_chart_version
    for name, (version, _) in bootstrap_addons(env.gitops.repo_url).items():
        if name == "hyperpod-dependencies" and not (primary and env.cluster.hyperpod.enabled):
            continue  # its ApplicationSet selects clusters HyperPod joins (the primary's)
        out[name] = version
    return out


def _inventory(env: EnvironmentSpec) -> dict[str, AddOn]:
    values = {name: v for name, (_, v) in bootstrap_addons(env.gitops.repo_url).items()}
    configuration = CloudWatchObservabilityAddOn.configuration or {}
    return addon_inventory(
        bootstrap_values=values,
        karpenter_values=values.get("karpenter", {}),
        cloudwatch_tolerations=list(configuration.get("tolerations", [])),  # type: ignore[call-overload]
        argocd_node_selector=ARGOCD_NODE_SELECTOR,
    )


def _cases() -> list[tuple[str, str]]:
    return [
        (name, plan.region)
        for name in environment_names()
        for plan in plan_regions(load_environment(name))
    ]


def _check(env: EnvironmentSpec, region: str) -> list[str]:
    """Every failure at rest, at peak and during each rollout, with a summary of the
    node groups at rest."""
    plan = next(p for p in plan_regions(env) if p.region == region)
    inventory = _inventory(env)
    addons = [inventory[name] for name in _installed(env, primary=plan.primary)]
    groups = node_groups(env, plan)
    workloads = tree_workloads(env, region) + addon_workloads(addons)
    failures = []
    rest = place(groups, workloads)
    failures += [f"at rest: {f}" for f in rest.failures]
    failures += [f"at peak: {f}" for f in place(groups, workloads, peak=True).failures]
    for w in workloads:
        if w.surge and not rest.failures:
            rollout = place(groups, workloads, surge_of=w.owner)
            failures += [f"rolling out {w.owner}: {f}" for f in rollout.failures]
    if failures:
        failures.append("node groups at rest:\n" + summary(rest.nodes))
    return failures


@pytest.mark.parametrize(("name", "region"), _cases())
def test_every_pod_of_the_environment_gets_a_node(name: str, region: str) -> None:
    failures = _check(load_environment(name), region)
    assert not failures, f"{name} in {region}:\n" + "\n".join(failures)


def test_dev_system_group_of_two_m6i_large_is_refused_naming_pod_and_group() -> None:
    """The group dev had (2 x m6i.large, the old default) cannot hold the picker beside
    bbr, auth, Envoy and the add-ons: the check says which pod and which group."""
    dev = load_environment("dev")
    small = dev.model_copy(
        update={
            "cluster": dev.cluster.model_copy(
                update={
                    "system_node_group": SystemNodeGroupSpec(
                        instance_type="m6i.large", min_size=2, max_size=4, desired_size=2
                    )
                }
            )
        }
    )
    failures = _check(small, dev.aws.region)
    assert failures
    assert any("does not fit: group system (2 x m6i.large)" in f for f in failures), failures


@pytest.mark.parametrize("name", environment_names())
def test_every_addon_is_transcribed_at_the_version_the_tree_pins(name: str) -> None:
    """A new add-on, or a new pin of one, must come with its pods read from that
    version's chart (addon_pods.py)."""
    env = load_environment(name)
    inventory = _inventory(env)
    for addon, pinned in _installed(env, primary=True).items():
        assert addon in inventory, f"{addon}: its pods are not in tests/gitops/addon_pods.py"
        assert inventory[addon].version == pinned, (
            f"{addon}: the tree pins {pinned}, addon_pods.py read {inventory[addon].version}; "
            "re-read that version's chart values"
        )


def test_allocatable_follows_the_eks_ami_formulas() -> None:
    """nodeadm `getCPUMillicoresToReserve` and `getMemoryMebibytesToReserve`
    (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go), worked by hand: 2 vCPUs
    keep 60 + 10 m; 4 add 2 x 5; 8 add 4 x 2.5; an m6i.large's maxPods is 3 x (10 - 1) + 2
    = 29, so 255 + 11 x 29 = 574 Mi are reserved and 100 Mi kept for eviction."""
    assert [kube_reserved_cpu_m(n) for n in (1, 2, 4, 8, 192)] == [60, 70, 80, 90, 550]
    node = allocatable("m6i.large")
    assert node.pods == 29
    assert node.cpu_m == 1930
    assert node.memory == (int(8 * 1024 * 0.925) - 574 - 100) * MI
    assert allocatable("g5.2xlarge").gpu == 1
