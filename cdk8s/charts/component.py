"""One gateway component: its ServiceAccount, Deployment, Service, PodDisruptionBudget and
NetworkPolicy, on the typed Kubernetes API (charts/kube.py).

Every chart that runs pods (the picker, the body-based router, `igw auth`, the global
router, the model servers) declares them here, so a chart reads as the list of its
components and what every pod shares is decided once: the restricted security context,
no Service links, spread over zones and nodes, the selector derived from the labels, a
rollout that keeps capacity, and five revisions kept for `kubectl rollout undo`.

    GatewayComponent(
        self, "bbr",
        name=BBR, namespace=ns, labels=bbr_labels(), wave=Wave.CONTROLLERS,
        pod=Pod(containers=[...], volumes=[...], annotations={...}),
        rollout=Rollout(replicas=2),
        service_ports=[k8s.ServicePort(name="grpc", port=9004, ...)],
        min_available=1,
        ingress=[k8s.NetworkPolicyIngressRule(...)],
    )

Each part is optional where a component has none: `service_account=False` for pods that
share one (the model servers' `vllm`), no `service_ports` for pods reached through an
InferencePool, no budget for a single replica (a PDB would block every node drain), no
`ingress` where the namespace's fleet-wide policy (charts/network.py) covers the pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from constructs import Construct

from .base import Wave, object_meta, selector_labels
from .kube import k8s
from .workloads import (
    ProbeAction,
    empty_dir,
    gateway_service_container,
    mount,
    pod_security_context,
    spread,
)

__all__ = ["GatewayComponent", "Pod", "Rollout", "gateway_service_pod", "service_account_manifest"]


@dataclass(frozen=True, kw_only=True)
class Pod:
    """What differs between the components' pods; the rest is the construct's.

    `service_account` defaults to the component's own; `labels` to the component's
    (a model server's Deployment carries one label more than its pods)."""

    containers: Sequence[k8s.Container]
    volumes: Sequence[k8s.Volume] = ()
    service_account: str | None = None
    #: Only a pod that calls the Kubernetes API mounts a token (the picker).
    automount_token: bool = False
    termination_grace_s: int | None = None
    affinity: k8s.Affinity | None = None
    tolerations: Sequence[k8s.Toleration] = ()
    #: On the pod template: a config hash here rolls the pods when the config changes.
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """The Deployment's replicas and update strategy.

    The default is a surge: a new pod starts before an old one goes, so a stateless
    component never dips in capacity. `replicas=None` leaves the count to an autoscaler
    (KEDA's ScaledObject), which a rendered count would fight on every sync."""

    replicas: int | None
    max_surge: int = 1
    max_unavailable: int = 0
    progress_deadline_s: int | None = None


def gateway_service_pod(
    *,
    image: str,
    container: str,
    args: Sequence[str],
    port: tuple[str, int],
    check: ProbeAction,
    volume: tuple[str, k8s.Volume] | None = None,
    annotations: Mapping[str, str] | None = None,
    env: Sequence[k8s.EnvVar] = (),
) -> Pod:
    """The pod of a small gateway service (`igw bbr`, `igw auth`): the gateway image, one
    port with its probes, at most one read-only volume (`volume`: where it is mounted,
    and the volume) and a bounded scratch directory."""
    own = [] if volume is None else [mount(volume[1].name, volume[0], read_only=True)]
    spec = gateway_service_container(
        image=image,
        name=container,
        args=args,
        port=port,
        check=check,
        mounts=[*own, mount("tmp", "/tmp")],
        env=env,
    )
    return Pod(
        containers=[spec],
        volumes=[*([] if volume is None else [volume[1]]), empty_dir("tmp", size="64Mi")],
        annotations=annotations or {},
    )


def service_account_manifest(
    scope: Construct,
    construct_id: str,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    wave: Wave,
) -> k8s.KubeServiceAccount:
    """A ServiceAccount that mounts no token by default (a pod that needs one says so)."""
    return k8s.KubeServiceAccount(
        scope,
        construct_id,
        metadata=object_meta(
            api_version="v1", name=name, namespace=namespace, labels=labels, wave=wave
        ),
        automount_service_account_token=False,
    )


class GatewayComponent(Construct):
    """ServiceAccount, Deployment, Service, PodDisruptionBudget and NetworkPolicy of one
    component, all named `name` and labelled `labels`, in one sync wave."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        namespace: str,
        labels: Mapping[str, str],
        wave: Wave,
        pod: Pod,
        rollout: Rollout,
        service_account: bool = True,
        service_ports: Sequence[k8s.ServicePort] = (),
        min_available: int | None = None,
        max_unavailable: int | None = None,
        ingress: Sequence[k8s.NetworkPolicyIngressRule] | None = None,
        checkov_skips: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if min_available is not None and max_unavailable is not None:
            raise ValueError(f"{name}: a disruption budget sets minAvailable or maxUnavailable")
        self.selector = selector_labels(labels)

        def meta(api_version: str, skips: Mapping[str, str] | None = None) -> k8s.ObjectMeta:
            return object_meta(
                api_version=api_version,
                name=name,
                namespace=namespace,
                labels=labels,
                wave=wave,
                checkov_skips=skips,
            )

        if service_account:
            service_account_manifest(
                self, "sa", name=name, namespace=namespace, labels=labels, wave=wave
            )
        self.deployment = k8s.KubeDeployment(
            self,
            "deployment",
            metadata=meta("apps/v1", checkov_skips),
            spec=self._deployment_spec(name=name, labels=labels, pod=pod, rollout=rollout),
        )
        selector = k8s.LabelSelector(match_labels=self.selector)
        if service_ports:
            k8s.KubeService(
                self,
                "service",
                metadata=meta("v1"),
                spec=k8s.ServiceSpec(
                    type="ClusterIP", selector=self.selector, ports=list(service_ports)
                ),
            )
        if min_available is not None or max_unavailable is not None:
            k8s.KubePodDisruptionBudget(
                self,
                "pdb",
                metadata=meta("policy/v1"),
                spec=k8s.PodDisruptionBudgetSpec(
                    selector=selector,
                    min_available=_count(min_available),
                    max_unavailable=_count(max_unavailable),
                ),
            )
        if ingress is not None:
            k8s.KubeNetworkPolicy(
                self,
                "network-policy",
                metadata=meta("networking.k8s.io/v1"),
                spec=k8s.NetworkPolicySpec(
                    pod_selector=selector, policy_types=["Ingress"], ingress=list(ingress)
                ),
            )

    def _deployment_spec(
        self, *, name: str, labels: Mapping[str, str], pod: Pod, rollout: Rollout
    ) -> k8s.DeploymentSpec:
        template = k8s.PodTemplateSpec(
            metadata=k8s.ObjectMeta(
                labels=dict(pod.labels if pod.labels is not None else labels),
                annotations=dict(pod.annotations) or None,
            ),
            spec=k8s.PodSpec(
                service_account_name=pod.service_account or name,
                automount_service_account_token=pod.automount_token,
                enable_service_links=False,
                security_context=pod_security_context(),
                topology_spread_constraints=spread(self.selector),
                termination_grace_period_seconds=pod.termination_grace_s,
                affinity=pod.affinity,
                tolerations=list(pod.tolerations) or None,
                containers=list(pod.containers),
                volumes=list(pod.volumes),
            ),
        )
        strategy = k8s.DeploymentStrategy(
            type="RollingUpdate",
            rolling_update=k8s.RollingUpdateDeployment(
                max_surge=_count(rollout.max_surge), max_unavailable=_count(rollout.max_unavailable)
            ),
        )
        return k8s.DeploymentSpec(
            replicas=rollout.replicas,
            progress_deadline_seconds=rollout.progress_deadline_s,
            revision_history_limit=5,
            selector=k8s.LabelSelector(match_labels=self.selector),
            strategy=strategy,
            template=template,
        )


def _count(value: int | None) -> k8s.IntOrString | None:
    return None if value is None else k8s.IntOrString.from_number(value)
