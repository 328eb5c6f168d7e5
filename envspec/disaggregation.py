"""Prefill/decode disaggregation of a model server (`model_servers[].disaggregation`).

A P/D model server runs as two vLLM Deployments of one pool, told apart by the role
label llm-d uses (`llm-d.ai/role: prefill | decode`; llm-d-inference-scheduler
`pkg/plugins/filter/pd_role.go`): prefill pods compute the prompt's KV cache, decode
pods pull it over NIXL and stream the answer. One InferencePool selects both; the
picker's decode profile ranks decode pods, and its decider sends a request's prefill to
a prefill pod when the best decode pod lacks at least `nonCachedTokens` of its prompt
(llm-d-inference-scheduler `pkg/plugins/profile/prefix_based_pd_decider.go`).

Each role scales on its own (llm-d guides/pd-disaggregation: "tuning the ratio of P
workers to D workers", "P workers with less parallelism and more replicas"), so each
carries its own bounds and, optionally, its own node group. This module owns the
Deployment names of a P/D pool and puts the pool's picker config (its profiles and
plugins: `inference_gateway.core.scheduling.pd_config`, the same the simulator measures) into the
environment's (`pd_gateway_config`), so the charts and the validation can never
disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inference_gateway.core.scheduling.pd import ROLE_LABEL

# The role label and the plugin types, as the picker's scheduler registers them
# (llm-d-inference-scheduler pkg/plugins/filter/pd_role.go, pkg/plugins/profile/).
from inference_gateway.core.scheduling.pd_config import (
    pd_names,
    pd_plugins,
    pd_profiles,
    role_filters,
)

if TYPE_CHECKING:
    from envspec.workloads import ModelServerSpec
    from inference_gateway.config.spec import GatewayConfigSpec

__all__ = [
    "DECODER_PORT",
    "KV_TRANSFER_CONFIG",
    "PD_ROLES",
    "ROLE_LABEL",
    "SIDECAR_PORT",
    "DisaggregationSpec",
    "PdRole",
    "RoleSpec",
    "deployment_name",
    "pd_gateway_config",
]

PdRole = Literal["prefill", "decode"]
PD_ROLES: tuple[PdRole, PdRole] = ("prefill", "decode")
#: vLLM's flag value for NIXL transfers both ways (llm-d guides/pd-disaggregation
#: modelserver patch-decode.yaml / patch-prefill.yaml: `--kv-transfer-config`).
KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
#: vLLM's port on a decode pod: the routing sidecar takes the pool's target port and
#: reaches vLLM here (llm-d patch-decode.yaml: `--port=8200`).
DECODER_PORT = 8200
#: The pool's target port: the sidecar on decode pods, vLLM itself on prefill pods.
SIDECAR_PORT = 8000


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoleSpec(_Section):
    """One role's Deployment: its bounds and, optionally, other nodes than the server's."""

    min_replicas: int = Field(
        default=1,
        ge=1,
        description="Replicas the role keeps; at least 1: a prefill role at zero has no "
        "pod whose queue could wake it, and a decode role at zero serves nothing.",
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        description="Set to let KEDA scale the role between min_replicas and this.",
    )
    node_group: str | None = Field(
        default=None, description="Node group of this role; default: the server's."
    )

    @model_validator(mode="after")
    def _bounds(self) -> RoleSpec:
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas ({self.max_replicas}) is below min_replicas ({self.min_replicas})"
            )
        return self


class DisaggregationSpec(_Section):
    """Both roles (required: a P/D pool without one of them cannot serve) and the
    decider's threshold."""

    prefill: RoleSpec
    decode: RoleSpec
    non_cached_tokens: int = Field(
        default=512,
        ge=0,
        description="Prompt tokens the best decode pod lacks from which the prefill runs "
        "on a prefill pod (the prefix-based-pd-decider's nonCachedTokens); 0: always.",
    )
    prefill_waiting_target: float = Field(
        default=2.0, gt=0, description="Requests waiting in vLLM per prefill pod (KEDA)."
    )
    decode_kv_cache_target: float = Field(
        default=0.8, gt=0, le=1, description="Mean KV-cache use of the decode pods (KEDA)."
    )

    def role(self, role: PdRole) -> RoleSpec:
        return self.prefill if role == "prefill" else self.decode


def deployment_name(pool: str, role: PdRole) -> str:
    """A role's Deployment: `<pool>-prefill`, `<pool>-decode`."""
    return f"{pool}-{role}"


def pd_gateway_config(
    gateway: GatewayConfigSpec, model_servers: Sequence[ModelServerSpec]
) -> dict[str, Any]:
    """`gateway` as the picker reads it (camelCase, built-ins included), with, for every
    P/D pool, the role filters, its decider and profile handler, its two profiles, and
    its models' profile set to the decode profile (what makes a request P/D-capable).
    Unchanged when no server is disaggregated."""
    spec: dict[str, Any] = gateway.model_dump(mode="json", by_alias=True, exclude_none=True)
    pd = [s for s in model_servers if s.disaggregation is not None]
    if not pd:
        return spec
    plugins: list[dict[str, Any]] = spec["plugins"]
    plugins += [p.model_dump(mode="json", by_alias=True, exclude_none=True) for p in role_filters()]
    for server in pd:
        assert server.disaggregation is not None
        names = pd_names(server.pool)
        plugins += [
            p.model_dump(mode="json", by_alias=True, exclude_none=True)
            for p in pd_plugins(
                names, server.disaggregation.non_cached_tokens, gateway.default_profile
            )
        ]
        spec["schedulingProfiles"] += [
            p.model_dump(mode="json", by_alias=True, exclude_none=True) for p in pd_profiles(names)
        ]
        for model in spec["models"]:
            if model["pool"] == server.pool:
                model["profile"] = names.decode_profile
    return spec
