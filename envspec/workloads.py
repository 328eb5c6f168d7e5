"""Kubernetes-side sections of environment.yaml (owned by the cdk8s charts).

`model_servers` says which vLLM Deployments run where, `canaries` which client-facing
names are split onto other models (InferenceModelRewrite), `kubernetes` the few settings
of the gateway's own workloads. `workload_problems` holds the cross checks that need the
`gateway` section too (a pool whose selector matches no Deployment, a model served by a
pool it is not routed to, a canary split across pools); `EnvironmentSpec` calls it, so a
bad file fails at load time with the field path and nothing is synthesised.

The pod labels of a model server are derived here (`model_server_pod_labels`), in one
place, because both the validation and the charts must agree on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envspec.disaggregation import (
    DECODER_PORT,
    PD_ROLES,
    ROLE_LABEL,
    SIDECAR_PORT,
    DisaggregationSpec,
    PdRole,
    deployment_name,
)

if TYPE_CHECKING:
    from inference_gateway.config.spec import GatewayConfigSpec, LabelSelector

__all__ = [
    "ROUTE_TIMEOUT_S",
    "AuthSpec",
    "BbrSpec",
    "CanarySpec",
    "CanaryTargetSpec",
    "JwtSpec",
    "KubernetesSpec",
    "ModelServerSpec",
    "canary_pool",
    "model_server_deployment",
    "model_server_name",
    "model_server_node_group",
    "model_server_pod_labels",
    "model_server_roles",
    "workload_problems",
]

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JwtSpec(_Section):
    """One OIDC issuer whose tokens the gateway accepts (Envoy Gateway JWTProvider)."""

    issuer: str = Field(pattern=r"^https://")
    jwks_uri: str = Field(pattern=r"^https://")
    audiences: list[str] = Field(default_factory=list)
    required_claims: dict[Annotated[str, Field(min_length=1)], str] = Field(
        default_factory=dict,
        description="Claim -> value a token must carry (a list or space-separated claim "
        "matches any element); the managed add-on's requiredClaims.",
    )
    client_id_claim: str = Field(
        default="sub", description="Claim copied into x-igw-client-id (the fairness id)."
    )


class AuthSpec(_Section):
    """Credentials live in AWS Secrets Manager; External Secrets copies them into a Secret
    in the cluster (never into environment.yaml). API keys, JWTs or both."""

    api_keys_secret_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9/_+=.@-]{1,512}$",
        description="Secrets Manager secret holding a JSON object client-id -> API key.",
    )
    jwt: JwtSpec | None = None

    @model_validator(mode="after")
    def _some_credential(self) -> AuthSpec:
        if self.api_keys_secret_id is None and self.jwt is None:
            raise ValueError("set api_keys_secret_id, jwt or both (or leave auth out)")
        return self


class BbrSpec(_Section):
    """The body-based router (`igw bbr`) in front of the pools' routes."""

    enabled: bool = Field(
        default=True,
        description="Off only with one pool: every request then takes that pool's route "
        "and the picker reads the model from the body itself.",
    )
    replicas: int = Field(default=2, ge=1)


class TracingEnvSpec(_Section):
    """Traces in the cluster (docs/tracing.md): Envoy's OpenTelemetry tracer (EnvoyProxy
    `telemetry.tracing`), the gateway's own spans (the `gateway.tracing` config), and an
    OpenTelemetry Collector that receives both and exports them."""

    sampling_percent: int = Field(
        default=1,
        ge=0,
        le=100,
        description="Share of requests Envoy starts a trace for (EnvoyProxy samplingRate); "
        "the picker and the body-based router follow Envoy's decision.",
    )
    exporter: Literal["xray", "otlp"] = Field(
        default="xray",
        description="xray: AWS X-Ray in the cluster's region (the collector's Pod Identity "
        "may write trace segments); otlp: the OTLP/gRPC backend `otlp_endpoint` names.",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9.-]+:[0-9]{1,5}$",
        description="host:port of an OTLP/gRPC backend (exporter otlp).",
    )
    namespace: str = Field(default="observability", pattern=_DNS_LABEL, max_length=63)


class KubernetesSpec(_Section):
    """Settings of the gateway's own workloads in the cluster."""

    namespace: str = Field(default="igw", pattern=_DNS_LABEL, max_length=63)
    image_repository: str | None = Field(
        default=None,
        description="ECR repository of the gateway image; default igw-<env>/gateway (CDK).",
    )
    image_tag: str = Field(default="0.1.0", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    image_digest: str | None = Field(
        default=None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Digest of the released gateway image; when set, pods pull by digest.",
    )
    picker_replicas: int = Field(
        default=2,
        ge=1,
        description="Two or more so a drained node never stops routing (one gives that up: "
        "no PodDisruptionBudget then).",
    )
    picker_leader_election: bool = Field(
        default=False,
        description="The replicas elect one holder of the Lease igw-picker, which alone "
        "writes the InferenceGatewayConfig's status (igw picker --leader-elect-status), as "
        "the managed add-on's schedulers elect a leader above one replica; every replica "
        "still routes. Off: each replica writes the status when it changes.",
    )
    max_request_body_bytes: int = Field(
        default=4 * 2**20,
        ge=1024,
        le=64 * 2**20,
        description="Largest request body the gateway takes (413 beyond): the picker's and "
        "the auth service's limit; the managed add-on's bbr.maxRequestBodyBytes.",
    )
    bbr: BbrSpec = BbrSpec()
    envoy_gateway_namespace: str = Field(default="envoy-gateway-system", pattern=_DNS_LABEL)
    monitoring_namespace: str = Field(
        default="monitoring", pattern=_DNS_LABEL, description="Where Prometheus runs."
    )
    max_parallel_requests: int = Field(
        default=16384,
        ge=1025,
        le=1_000_000,
        description="Circuit-breaker thresholds of the route and ext_proc clusters; above "
        "Envoy's default of 1,024, since each streaming request holds an ext_proc stream.",
    )
    auth: AuthSpec | None = Field(
        default=None, description="Who may call: API keys (and JWT) via a SecurityPolicy."
    )
    tracing: TracingEnvSpec | None = Field(
        default=None, description="Traces through Envoy, the routers and a collector."
    )


class ModelServerSpec(_Section):
    """One vLLM Deployment: a pool on one GPU generation."""

    pool: str
    node_group: str
    image: str = "vllm/vllm-openai:v0.11.0"
    image_digest: str | None = Field(
        default=None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Digest of `image`; when set, pods pull by digest (the tag is kept "
        "for the reader only).",
    )
    model: str = Field(description="Hugging Face id or path the server loads.")
    revision: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$",
        description="The model repository's revision (a commit hash pins it): vLLM's "
        "--revision (its tokenizer revision too) and where the picker's copy of the "
        "tokenizer files comes from; unpinned, both read the branch head at their start.",
    )
    served_model_name: str | None = None
    replicas: int = Field(default=1, ge=0)
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        description="Set to scale with KEDA on the gateway's saturation and queue between "
        "replicas (or 0, see scale_to_zero) and this.",
    )
    scale_to_zero: bool = Field(
        default=False,
        description="Let KEDA remove every replica while nothing is queued (dev, batch).",
    )
    saturation_target: float = Field(
        default=0.8, gt=0, le=1, description="inference_pool_saturation KEDA aims for."
    )
    queue_depth_target: float = Field(
        default=4.0, gt=0, description="Requests queued at the gateway per replica."
    )
    gpus: int = Field(default=1, ge=1)
    cpu: str = "4"
    memory: str = "24Gi"
    shm_size: str = Field(default="8Gi", description="/dev/shm, for NCCL and the tokenizer pool.")
    max_model_len: int = Field(default=8192, ge=256)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    enable_prefix_caching: bool = True
    block_size: Literal[8, 16, 32, 64, 128] = Field(
        default=16,
        description="vLLM's --block-size (tokens per KV block; 16 is vLLM's CUDA default, "
        "MLA models force 64 or 128): the picker's precise prefix scorer hashes blocks of "
        "the same size.",
    )
    prefix_caching_hash_algo: Literal["sha256", "sha256_cbor"] = Field(
        default="sha256",
        description="vLLM's --prefix-caching-hash-algo (v0.11.0's choices); the picker "
        "hashes prompts the same way.",
    )
    max_loras: int = Field(default=0, ge=0)
    adapters: list[str] = Field(
        default_factory=list,
        description="LoRA adapters loaded at start, each from its adapter_sources entry.",
    )
    adapter_sources: dict[str, str] = Field(
        default_factory=dict,
        description="Adapter name -> Hugging Face id or path vLLM loads it from "
        "(--lora-modules NAME=SOURCE).",
    )
    tool_call_parser: str | None = None
    drain_seconds: int = Field(
        default=60, ge=0, le=3600, description="preStop sleep so in-flight streams finish."
    )
    hf_token_secret: str | None = Field(
        default=None, description="Secret with key HF_TOKEN, for gated models."
    )
    hf_token_secret_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9/_+=.@-]{1,512}$",
        description="Secrets Manager secret with the Hugging Face token; External Secrets "
        "copies it into the Secret the pods mount (hf_token_secret, default hf-token).",
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict, description="Extra pod labels, e.g. for a pool selector."
    )
    disaggregation: DisaggregationSpec | None = Field(
        default=None,
        description="Run the pool as prefill and decode Deployments (envspec/disaggregation.py).",
    )

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model


class CanaryTargetSpec(_Section):
    model: str
    weight: int = Field(ge=0, le=1_000_000)


class CanarySpec(_Section):
    """An InferenceModelRewrite: a client-facing name split onto target models.

    A weight of 0 parks a target (it is left out of the rendered resource, whose weights
    are at least 1 upstream); at least one weight must be above 0.
    """

    name: str = Field(pattern=_DNS_LABEL, max_length=63)
    model: str
    targets: list[CanaryTargetSpec] = Field(min_length=1)

    @field_validator("targets")
    @classmethod
    def _some_weight(cls, targets: list[CanaryTargetSpec]) -> list[CanaryTargetSpec]:
        if all(t.weight == 0 for t in targets):
            raise ValueError("every weight is 0, so the rewrite would route nowhere")
        return targets


def model_server_name(server: ModelServerSpec) -> str:
    """The Deployment name: stable when a second GPU generation joins the pool.

    A pool already named after its node group (`llama-8b-a10g` on `a10g`) is not
    suffixed twice.
    """
    if server.pool.endswith(f"-{server.node_group}"):
        return f"vllm-{server.pool}"
    return f"vllm-{server.pool}-{server.node_group}"


def model_server_deployment(server: ModelServerSpec, role: PdRole | None) -> str:
    """The Deployment of a model server, or of one role of a P/D one (`<pool>-<role>`)."""
    return model_server_name(server) if role is None else deployment_name(server.pool, role)


def model_server_roles(server: ModelServerSpec) -> tuple[PdRole | None, ...]:
    """The Deployments of a model server, by role: (None,) for an aggregated one."""
    return PD_ROLES if server.disaggregation is not None else (None,)


def model_server_node_group(server: ModelServerSpec, role: PdRole | None) -> str:
    """Where a role runs: its own node group if it names one, else the server's."""
    if role is None or server.disaggregation is None:
        return server.node_group
    return server.disaggregation.role(role).node_group or server.node_group


def model_server_pod_labels(
    server: ModelServerSpec, *, gpu: str, role: PdRole | None = None
) -> dict[str, str]:
    """The labels every pod of this model server (of `role`, for a P/D one) carries;
    pools select on them. A role's pods are their own instance (its Deployment) and
    carry llm-d's role label, which the picker's prefill and decode filters read."""
    labels = {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": model_server_deployment(server, role),
        "app.kubernetes.io/component": "model-server",
        "app.kubernetes.io/part-of": "inference-gateway",
        "igw.dev/pool": server.pool,
        "igw.dev/gpu": gpu,
        **server.pod_labels,
    }
    if role is not None:
        labels[ROLE_LABEL] = role
    return labels


def _selects(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    return not selector.selects_everything and selector.matches(labels)


def _shown(selector: LabelSelector) -> dict[str, Any]:
    return selector.model_dump(by_alias=True)


def _block_hashing_problems(model_servers: Sequence[ModelServerSpec]) -> list[str]:
    """The picker has one precise prefix scorer for every pool: the servers that cache
    prefixes must hash blocks alike, each served name must come from one model (its
    tokenizer), and each adapter must have one place in `adapters` (vLLM keys its
    blocks by that place's number)."""
    problems: list[str] = []
    first: tuple[int, ModelServerSpec] | None = None
    source: dict[str, tuple[int, str, str | None]] = {}
    place: dict[str, tuple[int, int]] = {}
    for i, server in enumerate(model_servers):
        if not server.enable_prefix_caching:
            continue
        where = f"model_servers[{i}]"
        if first is None:
            first = (i, server)
        for field in ("block_size", "prefix_caching_hash_algo"):
            if getattr(server, field) != getattr(first[1], field):
                problems.append(
                    f"{where}.{field}: {getattr(server, field)!r} differs from "
                    f"model_servers[{first[0]}]'s {getattr(first[1], field)!r}, and the "
                    "picker's precise prefix scorer hashes every pool's blocks one way"
                )
        seen = source.setdefault(server.served_name, (i, server.model, server.revision))
        if seen[1:] != (server.model, server.revision):
            problems.append(
                f"{where}.model: {server.served_name!r} is served from "
                f"model_servers[{seen[0]}]'s files too, so model and revision must match"
            )
        for j, adapter in enumerate(server.adapters):
            at = place.setdefault(adapter, (i, j))
            if at[1] != j:
                problems.append(
                    f"{where}.adapters[{j}]: {adapter!r} is adapters[{at[1]}] of "
                    f"model_servers[{at[0]}]: vLLM numbers adapters by place (its LoRA "
                    "id keys the adapter's cache blocks), so list it at the same place"
                )
    return problems


def workload_problems(
    *,
    gateway: GatewayConfigSpec,
    model_servers: Sequence[ModelServerSpec],
    canaries: Sequence[CanarySpec],
    gpu_of_node_group: Mapping[str, str],
) -> list[str]:
    """Cross checks between `gateway`, `model_servers` and `canaries`, as field paths."""
    problems: list[str] = []
    pools = {p.name: p for p in gateway.pools}
    model_pool = {m.name: m.pool for m in gateway.models}
    adapter_model = {a: m.name for m in gateway.models for a in m.adapters}
    labels = [
        [
            model_server_pod_labels(
                s, gpu=gpu_of_node_group.get(model_server_node_group(s, r), "unknown"), role=r
            )
            for r in model_server_roles(s)
        ]
        for s in model_servers
    ]

    seen: dict[str, int] = {}
    for i, server in enumerate(model_servers):
        where = f"model_servers[{i}]"
        name = model_server_name(server)
        if name in seen:
            problems.append(f"{where}: same pool and node_group as model_servers[{seen[name]}]")
        seen[name] = i
        pool = pools.get(server.pool)
        unselected = [x for x in labels[i] if pool and not _selects(pool.selector, x)]
        if pool is not None and unselected:
            problems.append(
                f"{where}.pod_labels: pods labelled {unselected[0]} are not selected by "
                f"pool {pool.name!r} (selector {_shown(pool.selector)})"
            )
        routed = model_pool.get(server.served_name)
        if routed is None:
            problems.append(
                f"{where}.served_model_name: {server.served_name!r} is not in gateway.models"
            )
        elif routed != server.pool:
            problems.append(
                f"{where}.served_model_name: {server.served_name!r} is routed to pool "
                f"{routed!r}, so pool {server.pool!r} cannot claim it too"
            )
        for j, adapter in enumerate(server.adapters):
            if adapter_model.get(adapter) != server.served_name:
                problems.append(
                    f"{where}.adapters[{j}]: {adapter!r} is not an adapter of "
                    f"gateway model {server.served_name!r}"
                )
        if server.max_loras == 0 and server.adapters:
            problems.append(f"{where}.max_loras: adapters need max_loras of at least 1")
        for adapter in server.adapters:
            if adapter not in server.adapter_sources:
                problems.append(
                    f"{where}.adapter_sources: no source for adapter {adapter!r} (a Hugging "
                    "Face id or a path in the image)"
                )
        if not server.model.startswith(("s3://", "/")) and not (
            server.hf_token_secret or server.hf_token_secret_id
        ):
            problems.append(
                f"{where}.hf_token_secret_id: {server.model!r} comes from Hugging Face, whose "
                "gated models need a token; name its Secrets Manager secret (or load from s3://)"
            )

    problems += _picker_wiring_problems(gateway)
    problems += _disaggregation_problems(gateway, model_servers)
    problems += _block_hashing_problems(model_servers)
    for i, pool in enumerate(gateway.pools):
        where = f"gateway.pools[{i}].selector"
        if pool.selector.selects_everything:
            problems.append(f"{where}: empty, it would select every pod of the namespace")
            continue
        if pool.selector.match_expressions:
            # upstream InferencePool v1 selects by matchLabels only, and the cluster
            # routes through the InferencePool rendered from this pool
            problems.append(
                f"{where}.matchExpressions: an InferencePool (v1) selects by matchLabels "
                "only; give this pool matchLabels (matchExpressions work where no "
                "InferencePool is rendered: igw serve, igw picker --config)"
            )
        selected = [
            j
            for j in range(len(model_servers))
            if any(_selects(pool.selector, x) for x in labels[j])
        ]
        if not selected:
            problems.append(f"{where}: {_shown(pool.selector)} matches no model-server Deployment")
        for j in selected:
            if model_servers[j].pool != pool.name:
                problems.append(
                    f"{where}: also selects model_servers[{j}] of pool {model_servers[j].pool!r}"
                )

    canary_models: dict[str, int] = {}
    for i, canary in enumerate(canaries):
        where = f"canaries[{i}]"
        if canary.model in canary_models:
            problems.append(
                f"{where}.model: {canary.model!r} already split by "
                f"canaries[{canary_models[canary.model]}]"
            )
        canary_models[canary.model] = i
        target_pools = set()
        for target in canary.targets:
            model = adapter_model.get(target.model, target.model)
            if model in model_pool:
                target_pools.add(model_pool[model])
        if len(target_pools) > 1:
            problems.append(
                f"{where}.targets: models of pools {sorted(target_pools)}; one rewrite "
                "splits within one pool"
            )
        elif target_pools and canary.model in model_pool:
            (target_pool,) = target_pools
            if model_pool[canary.model] != target_pool:
                problems.append(
                    f"{where}.model: {canary.model!r} is routed to pool "
                    f"{model_pool[canary.model]!r}, its targets to pool {target_pool!r}"
                )
    return problems


#: The model routes' request timeout (HTTPRoute `timeouts.request`): the longest a
#: completion stream may run, so also how long a picker being replaced keeps serving the
#: streams it is in (`igw picker --drain-timeout`, terminationGracePeriodSeconds). A
#: pool's own `routeTimeoutS` may be shorter, never longer (the drain covers this one).
ROUTE_TIMEOUT_S = 600

#: What Envoy AI Gateway v0.4, the controller that turns an InferencePool backendRef into
#: Envoy config, puts on the picker's ext_proc filter (`buildHTTPFilterForInferencePool`
#: in its `internal/extensionserver/inferencepool.go`): fail closed, 300 s per message.
PICKER_EXT_PROC_FAILS_OPEN = False
PICKER_EXT_PROC_MESSAGE_TIMEOUT_S = 300


def _picker_wiring_problems(gateway: GatewayConfigSpec) -> list[str]:
    """What the in-cluster wiring of the picker cannot do, refused at load time.

    A pool that asks to fail open would be rendered and silently fail closed; a queue
    wait longer than the ext_proc message timeout would be cut by Envoy mid-queue.
    """
    problems = []
    for i, pool in enumerate(gateway.pools):
        if pool.failure_mode == "FailOpen" and not PICKER_EXT_PROC_FAILS_OPEN:
            problems.append(
                f"gateway.pools[{i}].failureMode: FailOpen is not honoured in the cluster "
                "(the InferencePool's ext_proc filter fails closed; docs/infrastructure.md, "
                "'When the picker is unreachable')"
            )
        if pool.route_timeout_s is not None and pool.route_timeout_s > ROUTE_TIMEOUT_S:
            problems.append(
                f"gateway.pools[{i}].routeTimeoutS: {pool.route_timeout_s} s is longer than "
                f"the {ROUTE_TIMEOUT_S} s a replaced picker keeps serving its streams"
            )
    limit = PICKER_EXT_PROC_MESSAGE_TIMEOUT_S - 5
    for band, spec in gateway.flow_control.bands.items():
        if spec.ttl_s > limit:
            problems.append(
                f"gateway.flowControl.bands.{band}.ttlS: {spec.ttl_s} s is longer than the "
                f"picker's ext_proc message timeout allows ({limit} s)"
            )
    return problems


def _disaggregation_problems(
    gateway: GatewayConfigSpec, model_servers: Sequence[ModelServerSpec]
) -> list[str]:
    """What a P/D model server needs around it: a pool of its own (its two Deployments
    are named after the pool), no server-wide autoscaling (each role scales itself),
    the pool's target port on the decode pods' sidecar, and models that take the pool's
    decode profile (that is what makes their requests P/D-capable)."""
    problems: list[str] = []
    pools = {p.name: p for p in gateway.pools}
    for i, server in enumerate(model_servers):
        if server.disaggregation is None:
            continue
        where = f"model_servers[{i}]"
        others = [j for j, s in enumerate(model_servers) if s.pool == server.pool and j != i]
        if others:
            problems.append(
                f"{where}.disaggregation: pool {server.pool!r} also has model_servers"
                f"{others}; a P/D pool is served by one model server (its prefill and "
                "decode Deployments)"
            )
        if server.max_replicas is not None or server.scale_to_zero:
            problems.append(
                f"{where}.max_replicas: a P/D server scales per role; set "
                "disaggregation.prefill/decode.max_replicas instead (and no scale_to_zero)"
            )
        pool = pools.get(server.pool)
        if pool is not None and pool.target_port != SIDECAR_PORT:
            problems.append(
                f"gateway.pools: pool {pool.name!r} is P/D, so its targetPort is the decode "
                f"pods' sidecar on {SIDECAR_PORT} (vLLM listens on {DECODER_PORT} behind "
                f"it), not {pool.target_port}"
            )
        for j, model in enumerate(gateway.models):
            if model.pool == server.pool and model.profile is not None:
                problems.append(
                    f"gateway.models[{j}].profile: {model.name!r} is served by P/D pool "
                    f"{server.pool!r}, whose decode profile is its profile; leave it unset"
                )
    return problems


def canary_pool(canary: CanarySpec, gateway: GatewayConfigSpec) -> str:
    """The pool a (validated) canary splits in: the pool of its first known target."""
    model_pool = {m.name: m.pool for m in gateway.models}
    adapter_model = {a: m.name for m in gateway.models for a in m.adapters}
    for target in canary.targets:
        model = adapter_model.get(target.model, target.model)
        if model in model_pool:
            return model_pool[model]
    raise KeyError(canary.name)
