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
    "PICKER_EMF_LOG_GROUP",
    "PICKER_EMF_PIPELINE",
    "PICKER_LOG_PATH",
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


#: Where the picker's EMF records go (under the agent role's `/aws/containerinsights/
#: <cluster>/` prefix, stacks/parts/pod_identity.py).
PICKER_EMF_LOG_GROUP = "igw-emf"
#: The container logs of the EMF writers, kubelet's `<pod>_<namespace>_<container>-<id>.log`:
#: the picker (pod `igw-picker-…`, container `picker`, cdk8s/charts/picker.py; cluster
#: records) and the global router (`igw-global-router-…`, `global-router`,
#: cdk8s/charts/global_router.py; fleet records). Fluent Bit's tail takes a comma list.
PICKER_LOG_PATH = (
    "/var/log/containers/igw-picker-*_*_picker-*.log,"
    "/var/log/containers/igw-global-router-*_*_global-router-*.log"
)

#: A Fluent Bit pipeline the add-on runs beside its own (one more `extraFiles` entry, which
#: its fluent-bit.conf includes): the picker's EMF lines, their JSON merged at the top of
#: the record and sent with `log_format json/emf`. The add-on's application pipeline nests
#: a container's JSON under `log_processed` (`Merge_Log_Key`), where CloudWatch Logs does
#: not look for `_aws` (CloudWatch docs, "Embedded metric format specification": `_aws`
#: is a root member), so without this the alarms would read no data.
PICKER_EMF_PIPELINE = f"""\
[INPUT]
  Name                tail
  Tag                 igwemf.*
  Path                {PICKER_LOG_PATH}
  multiline.parser    docker, cri
  DB                  /var/fluent-bit/state/flb_igw_emf.db
  Mem_Buf_Limit       5MB
  Skip_Long_Lines     On
  Refresh_Interval    10
  Read_from_Head      ${{READ_FROM_HEAD}}

[FILTER]
  Name                grep
  Match               igwemf.*
  Regex               log ^\\{{"_aws"

[FILTER]
  Name                kubernetes
  Match               igwemf.*
  Kube_URL            https://kubernetes.default.svc:443
  Kube_Tag_Prefix     igwemf.var.log.containers.
  Merge_Log           On
  Keep_Log            Off
  Labels              Off
  Annotations         Off
  Use_Kubelet         On
  Kubelet_Port        10250
  Buffer_Size         0

[OUTPUT]
  Name                cloudwatch_logs
  Match               igwemf.*
  region              ${{AWS_REGION}}
  log_group_name      /aws/containerinsights/${{CLUSTER_NAME}}/{PICKER_EMF_LOG_GROUP}
  log_stream_prefix   ${{HOST_NAME}}-
  auto_create_group   true
  log_format          json/emf
"""


class CloudWatchObservabilityAddOn(AddOn):
    """Container Insights + the CloudWatch agent; its role comes through Pod Identity."""

    name = "amazon-cloudwatch-observability"
    requires = (PodIdentityAgentAddOn, CoreDnsAddOn)
    configuration = {
        # The agent's DaemonSet must reach GPU nodes too, to report GPU metrics.
        "tolerations": [{"operator": "Exists"}],
        # The picker's EMF records become the metrics the alarms read.
        "containerLogs": {
            "fluentBit": {"config": {"extraFiles": {"igw-emf.conf": PICKER_EMF_PIPELINE}}}
        },
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
