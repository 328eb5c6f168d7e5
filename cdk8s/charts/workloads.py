"""Pod-spec building blocks shared by the picker, the body-based router and vLLM, typed
(charts/kube.py).

One place decides what "hardened" means here (non-root, read-only root filesystem, no
capabilities, seccomp RuntimeDefault), so every Deployment passes the namespace's Pod
Security `restricted` level and checkov the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .kube import k8s

__all__ = [
    "CPU_LIMIT_SKIP",
    "DIGEST_SKIP",
    "ProbeAction",
    "container_port",
    "container_security_context",
    "empty_dir",
    "env_field",
    "env_secret",
    "env_value",
    "gateway_service_container",
    "mount",
    "pod_security_context",
    "pre_stop_sleep",
    "probe",
    "resources",
    "service_port",
    "spread",
]

RUN_AS = 10001

# Reasons for the checkov checks these workloads deliberately do not meet.
CPU_LIMIT_SKIP = {
    "CKV_K8S_11": "CPU limits throttle the latency-critical path; requests reserve the CPU"
}
DIGEST_SKIP = {
    "CKV_K8S_43": "images are pinned by immutable tag in environment.yaml, reviewed per PR",
    "CKV_K8S_15": "IfNotPresent: a pinned image is pulled once per node; Always would make "
    "every pod start (a GPU pod's too) depend on the registry being reachable",
}

#: What a probe asks: a gRPC health service or an HTTP path.
ProbeAction = k8s.GrpcAction | k8s.HttpGetAction


def pod_security_context() -> k8s.PodSecurityContext:
    return k8s.PodSecurityContext(
        run_as_non_root=True,
        run_as_user=RUN_AS,
        run_as_group=RUN_AS,
        fs_group=RUN_AS,
        seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
    )


def container_security_context() -> k8s.SecurityContext:
    return k8s.SecurityContext(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        run_as_non_root=True,
        run_as_user=RUN_AS,
        capabilities=k8s.Capabilities(drop=["ALL"]),
        seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
    )


def empty_dir(name: str, *, size: str, memory: bool = False) -> k8s.Volume:
    """A bounded scratch volume (a read-only root filesystem needs somewhere to write)."""
    source = k8s.EmptyDirVolumeSource(
        medium="Memory" if memory else None, size_limit=k8s.Quantity.from_string(size)
    )
    return k8s.Volume(name=name, empty_dir=source)


def mount(name: str, path: str, *, read_only: bool | None = None) -> k8s.VolumeMount:
    return k8s.VolumeMount(name=name, mount_path=path, read_only=read_only)


def container_port(name: str, number: int, *, protocol: str | None = None) -> k8s.ContainerPort:
    return k8s.ContainerPort(name=name, container_port=number, protocol=protocol)


def service_port(
    name: str, number: int, *, protocol: str | None = None, app_protocol: str | None = None
) -> k8s.ServicePort:
    """A Service port to the container port of the same name."""
    return k8s.ServicePort(
        name=name,
        port=number,
        target_port=k8s.IntOrString.from_string(name),
        protocol=protocol,
        app_protocol=app_protocol,
    )


def pre_stop_sleep(seconds: int) -> k8s.Lifecycle:
    """Sleep before SIGTERM, while the Service and Envoy stop sending the pod new work."""
    return k8s.Lifecycle(pre_stop=k8s.LifecycleHandler(sleep=k8s.SleepAction(seconds=seconds)))


def env_value(name: str, value: str) -> k8s.EnvVar:
    return k8s.EnvVar(name=name, value=value)


def env_field(name: str, path: str) -> k8s.EnvVar:
    """A variable from the pod's own fields (`metadata.namespace`, `status.podIP`)."""
    source = k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path=path))
    return k8s.EnvVar(name=name, value_from=source)


def env_secret(name: str, *, secret: str, key: str, optional: bool | None = None) -> k8s.EnvVar:
    selector = k8s.SecretKeySelector(name=secret, key=key, optional=optional)
    return k8s.EnvVar(name=name, value_from=k8s.EnvVarSource(secret_key_ref=selector))


def resources(
    *, requests: Mapping[str, str], limits: Mapping[str, str]
) -> k8s.ResourceRequirements:
    return k8s.ResourceRequirements(
        requests={k: k8s.Quantity.from_string(v) for k, v in requests.items()},
        limits={k: k8s.Quantity.from_string(v) for k, v in limits.items()},
    )


def probe(
    action: ProbeAction,
    *,
    period_s: int,
    failure_threshold: int | None = None,
    timeout_s: int | None = None,
) -> k8s.Probe:
    """A startup, readiness or liveness probe of `action` at its own pace."""
    grpc = action if isinstance(action, k8s.GrpcAction) else None
    http = action if isinstance(action, k8s.HttpGetAction) else None
    return k8s.Probe(
        grpc=grpc,
        http_get=http,
        period_seconds=period_s,
        failure_threshold=failure_threshold,
        timeout_seconds=timeout_s,
    )


def spread(selector: Mapping[str, str]) -> list[k8s.TopologySpreadConstraint]:
    """Spread replicas over zones and nodes, best effort, so one failure takes one."""
    return [
        k8s.TopologySpreadConstraint(
            max_skew=1,
            topology_key=key,
            when_unsatisfiable="ScheduleAnyway",
            label_selector=k8s.LabelSelector(match_labels=dict(selector)),
        )
        for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
    ]


def gateway_service_container(
    *,
    image: str,
    name: str,
    args: Sequence[str],
    port: tuple[str, int],
    check: ProbeAction,
    mounts: Sequence[k8s.VolumeMount],
    lifecycle: k8s.Lifecycle | None = None,
    env: Sequence[k8s.EnvVar] = (),
) -> k8s.Container:
    """A small gateway service's container (`igw bbr`, `igw auth`, `igw pd-sidecar`): the
    gateway image, one port with its probes (`check`), a small bounded footprint, hardened."""
    return k8s.Container(
        name=name,
        image=image,
        image_pull_policy="IfNotPresent",
        args=list(args),
        env=list(env) or None,
        ports=[container_port(*port)],
        startup_probe=probe(check, period_s=2, failure_threshold=30),
        readiness_probe=probe(check, period_s=5),
        liveness_probe=probe(check, period_s=10),
        resources=resources(
            requests={"cpu": "250m", "memory": "256Mi"}, limits={"memory": "512Mi"}
        ),
        security_context=container_security_context(),
        volume_mounts=list(mounts),
        lifecycle=lifecycle,
    )
