"""The pieces a P/D pool's pods add to a vLLM pod (envspec/disaggregation.py).

Both roles run vLLM with NIXL transfers both ways (`--kv-transfer-config`, kv_both) and
advertise their pod IP as NIXL's side-channel host (`VLLM_NIXL_SIDE_CHANNEL_HOST`, as
llm-d guides/pd-disaggregation modelserver/gpu/vllm/base/patch-decode.yaml does), so a
decode pod can pull a prefill pod's blocks. A prefill pod serves the pool's target port
itself; a decode pod runs vLLM on `DECODER_PORT` and, on the target port, the routing
sidecar (`igw pd-sidecar`, the gateway image), which reads the prefill pod the picker
chose from `x-prefiller-host-port`, runs the prefill leg there, then the decode leg on
its own vLLM (llm-d-routing-sidecar README: `-port=8000 -vllm-port=...`, the prefill pod
from `x-prefiller-host-port`; llm-d-inference-scheduler's
https://github.com/llm-d/llm-d-inference-scheduler/blob/main/docs/disagg_pd.md: "Decode
Worker ... contains the sidecar for coordination", no sidecar on prefill pods).

The sidecar dials only addresses inside `--allow-prefill` (llm-d's sidecar, with its SSRF
protection on, admits the hosts of its InferencePool's pods, which needs API access; a
CIDR allowlist needs none): the cluster's pod network. On
EKS the VPC CNI gives pods addresses of the VPC, so that is the VPC's CIDR; the rendered
manifests are the same in every region (the region overlays swap images only), so the
list holds every region's VPC CIDR, each a network of this environment's own (they are
disjoint, envspec/network.py).
"""

from __future__ import annotations

from envspec.disaggregation import DECODER_PORT, KV_TRANSFER_CONFIG, SIDECAR_PORT
from envspec.environment import EnvironmentSpec

from .base import gateway_image
from .kube import k8s
from .tracing import otel_env
from .workloads import empty_dir, env_field, gateway_service_container, mount, pre_stop_sleep

__all__ = [
    "SIDECAR",
    "SIDECAR_PORT_NAME",
    "kv_transfer_args",
    "nixl_env",
    "pod_cidrs",
    "sidecar_container",
    "sidecar_volumes",
]

SIDECAR = "pd-sidecar"
SIDECAR_PORT_NAME = "sidecar"
SIDECAR_TMP = "sidecar-tmp"
#: The sidecar's own probe path (`igw pd-sidecar` answers it once it listens, and passes
#: every other path, `/health` and `/metrics` too, to vLLM; whether vLLM can serve is
#: vLLM's own readiness probe, on the same pod), as `igw auth`'s probes are.
SIDECAR_PROBE = k8s.HttpGetAction(
    path="/healthz", port=k8s.IntOrString.from_string(SIDECAR_PORT_NAME)
)


def pod_cidrs(env: EnvironmentSpec) -> list[str]:
    """Every region's VPC CIDR: where the environment's pods have their addresses."""
    return sorted({env.cluster.vpc_cidr_of(region) for region in env.aws.regions})


def kv_transfer_args() -> list[str]:
    return ["--kv-transfer-config", KV_TRANSFER_CONFIG]


def nixl_env() -> list[k8s.EnvVar]:
    return [env_field("VLLM_NIXL_SIDE_CHANNEL_HOST", "status.podIP")]


def sidecar_container(env: EnvironmentSpec, *, drain_seconds: int) -> k8s.Container:
    """`igw pd-sidecar` on the pool's target port, in front of the pod's own vLLM.

    It drains as vLLM does (the same preStop sleep), or a rollout would cut the streams
    it is proxying while vLLM still serves them."""
    args = ["pd-sidecar", "--listen", f"0.0.0.0:{SIDECAR_PORT}"]
    args += ["--decoder", f"http://127.0.0.1:{DECODER_PORT}"]
    for cidr in pod_cidrs(env):
        args += ["--allow-prefill", cidr]
    if env.kubernetes.tracing is not None:  # the picker's sampling decides (parent-based)
        args += ["--trace-sampling", "0"]
    return gateway_service_container(
        image=gateway_image(env),
        name=SIDECAR,
        args=args,
        port=(SIDECAR_PORT_NAME, SIDECAR_PORT),
        check=SIDECAR_PROBE,
        mounts=[mount(SIDECAR_TMP, "/tmp")],
        lifecycle=pre_stop_sleep(drain_seconds),
        env=otel_env(env, "igw-pd-sidecar"),
    )


def sidecar_volumes() -> list[k8s.Volume]:
    return [empty_dir(SIDECAR_TMP, size="64Mi")]
