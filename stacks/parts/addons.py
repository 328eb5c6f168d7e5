"""EKS add-ons that declare what they need by class, not by string.

An add-on lists the add-on classes it requires in `requires`. `install_addons` refuses a
set whose requirements are missing — synth fails with a message naming both — and makes
each add-on's construct depend on the constructs of what it requires, so CloudFormation
creates them in order (the CloudWatch agent authenticates through the Pod Identity agent;
CoreDNS needs nodes to schedule on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

__all__ = [
    "AddOn",
    "CloudWatchObservabilityAddOn",
    "CoreDnsAddOn",
    "KubeProxyAddOn",
    "MissingAddOnError",
    "PodIdentityAgentAddOn",
    "VpcCniAddOn",
    "default_addons",
    "install_addons",
]


class MissingAddOnError(ValueError):
    """An add-on was asked for without an add-on it requires."""


class AddOn:
    """One EKS managed add-on; subclasses set `name` and, optionally, `requires`."""

    name: ClassVar[str]
    requires: ClassVar[tuple[type[AddOn], ...]] = ()
    configuration: ClassVar[dict[str, object] | None] = None

    def install(
        self, scope: Construct, cluster: eks.ICluster, after: Sequence[IDependable]
    ) -> eks.Addon:
        addon = eks.Addon(
            scope,
            type(self).__name__,
            cluster=cluster,
            addon_name=self.name,
            configuration_values=self.configuration,
            preserve_on_delete=False,
        )
        for dependency in after:
            addon.node.add_dependency(dependency)
        return addon


class VpcCniAddOn(AddOn):
    """Pod networking; prefix delegation lets GPU nodes host many pods per ENI.

    `enableNetworkPolicy` turns on the add-on's network-policy agent: without it EKS
    accepts NetworkPolicies and enforces none (EKS docs, "Restrict pod network traffic
    with Kubernetes network policies"), and the charts' policies would be decoration.
    """

    name = "vpc-cni"
    configuration = {
        "enableNetworkPolicy": "true",
        "env": {"ENABLE_PREFIX_DELEGATION": "true"},
    }


class KubeProxyAddOn(AddOn):
    name = "kube-proxy"


class CoreDnsAddOn(AddOn):
    """Cluster DNS; needs pod networking to become healthy."""

    name = "coredns"
    requires = (VpcCniAddOn,)


class PodIdentityAgentAddOn(AddOn):
    """Exchanges service-account tokens for the Pod Identity roles of stacks/identity.py."""

    name = "eks-pod-identity-agent"
    requires = (VpcCniAddOn,)


class CloudWatchObservabilityAddOn(AddOn):
    """Container Insights + the CloudWatch agent; its role comes through Pod Identity."""

    name = "amazon-cloudwatch-observability"
    requires = (PodIdentityAgentAddOn, CoreDnsAddOn)
    configuration = {
        # The agent's DaemonSet must reach GPU nodes too, to report GPU metrics.
        "tolerations": [{"operator": "Exists"}],
    }


def default_addons() -> list[AddOn]:
    return [
        VpcCniAddOn(),
        KubeProxyAddOn(),
        CoreDnsAddOn(),
        PodIdentityAgentAddOn(),
        CloudWatchObservabilityAddOn(),
    ]


def install_addons(
    scope: Construct,
    cluster: eks.ICluster,
    addons: Sequence[AddOn],
    *,
    after: Sequence[IDependable] = (),
) -> dict[type[AddOn], eks.Addon]:
    """Install `addons` in dependency order; `after` (e.g. node groups) comes first."""
    by_class = {type(a): a for a in addons}
    if len(by_class) != len(addons):
        raise MissingAddOnError("an add-on is listed twice")
    for addon in addons:
        for needed in addon.requires:
            if needed not in by_class:
                raise MissingAddOnError(
                    f"{type(addon).__name__} requires {needed.__name__}; "
                    f"add {needed.__name__}() to the cluster's add-ons"
                )
    installed: dict[type[AddOn], eks.Addon] = {}

    def visit(kind: type[AddOn], path: tuple[type[AddOn], ...]) -> eks.Addon:
        if kind in path:
            cycle = " -> ".join(k.__name__ for k in (*path, kind))
            raise MissingAddOnError(f"add-on dependency cycle: {cycle}")
        if kind not in installed:
            deps = [visit(needed, (*path, kind)) for needed in kind.requires]
            installed[kind] = by_class[kind].install(scope, cluster, [*after, *deps])
        return installed[kind]

    for addon in addons:
        visit(type(addon), ())
    return installed
