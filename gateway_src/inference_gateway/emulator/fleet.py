"""Many emulated pods in one process, on consecutive ports: `igw emulate --fleet FLEET.yaml`.

A fleet file lists groups of identical pods (unknown keys are errors, reported with
their field path)::

    base_port: 8001          # pod i listens on base_port + i; 0 = ephemeral ports (tests)
    host: 127.0.0.1
    pods:
      - {name: h100, gpu: H100, model: llama-3.1-8b, replicas: 4}
      - {name: a10g, gpu: A10G, model: llama-3.1-8b, replicas: 4,
         max_loras: 2, adapters: [sql, support]}
      # deliberate faults, for testing clients (emulator/behaviors.py)
      - {name: flaky, gpu: L4, model: llama-3.1-8b,
         behavior: {tool_call_error_rate: 0.2, temperature0_jitter: 1.0}}

A group of one replica is named after the group; larger groups name pods `NAME-0`, … .
Every pod gets the labels `igw.dev/pool`, `igw.dev/gpu` and `igw.dev/model` (plus the
group's own `labels`), and `write_endpoints` writes the upstream file-discovery shape
`endpoints: [{name, address, port, labels}]` that `igw serve --endpoints` reads.

`EmulatedFleet` is also the Python API for tests and demos:
`async with EmulatedFleet(spec) as fleet: ...`, with `stop_pod(name)` / `start_pod(name)`
for fault tests (a restarted pod keeps its port and loses its cache, as a restarted vLLM
process would).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inference_gateway.config.spec import format_validation_error, read_yaml
from inference_gateway.emulator.behaviors import PodBehavior
from inference_gateway.emulator.kv_publisher import (
    KVEventsConfig,
    offset_endpoint,
    subscriber_address,
)
from inference_gateway.emulator.kvtransfer import KVTransferConfig
from inference_gateway.emulator.profiles import PodProfile, pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.errors import ConfigError
from inference_gateway.protocols.vllm.block_hashing import HashAlgo
from inference_gateway.telemetry.tracing import Tracing

__all__ = [
    "POOL_LABEL",
    "EmulatedFleet",
    "Endpoint",
    "FleetSpec",
    "PodGroupSpec",
    "load_fleet",
    "parse_fleet",
]

POOL_LABEL = "igw.dev/pool"
GPU_LABEL = "igw.dev/gpu"
KV_EVENTS_LABEL = "igw.dev/kv-events"  # where the pod publishes (the picker subscribes)
MODEL_LABEL = "igw.dev/model"


class PodGroupSpec(BaseModel):
    """A group of identical pods: one GPU/model profile and vLLM's settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    gpu: str
    model: str
    replicas: int = Field(default=1, ge=1, le=1024)
    tp: int | None = Field(default=None, ge=1, le=64)
    max_loras: int | None = Field(default=None, ge=0, description="Default 1 with adapters.")
    adapters: list[str] = Field(default_factory=list)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    served_model_name: str | None = None
    hourly_usd: float | None = Field(default=None, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    kv_events_config: KVEventsConfig | None = Field(
        default=None,
        description="vLLM's --kv-events-config object; replica i publishes on the "
        "endpoint's port + i (vLLM's per-rank offset).",
    )
    hash_seed: str | None = Field(
        default=None, description="vLLM's PYTHONHASHSEED for block hashes (default: the env's)."
    )
    prefix_caching_hash_algo: HashAlgo = Field(
        default="sha256", description="vLLM's --prefix-caching-hash-algo (v0.11.0 choices)."
    )
    tokenizer: str | None = Field(
        default=None,
        description="vLLM's --tokenizer: a directory with the model's tokenizer files, whose "
        "ids the pods count and hash (default: the emulator's 4-bytes-per-token rule).",
    )
    kv_transfer_config: KVTransferConfig | None = Field(
        default=None,
        description="vLLM's --kv-transfer-config (disaggregated prefill/decode); each "
        "replica gets an engine id of its own.",
    )
    behavior: PodBehavior = Field(
        default_factory=PodBehavior,
        description="Deliberate imperfections (tool-call errors, temperature-0 jitter); "
        "see emulator/behaviors.py.",
    )

    @model_validator(mode="after")
    def _adapters_need_slots(self) -> Self:
        if self.adapters and self.max_loras == 0:
            raise ValueError("max_loras must be at least 1 when adapters are listed")
        if len(set(self.adapters)) != len(self.adapters):
            raise ValueError("adapters must be unique")
        return self


class FleetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_port: int = Field(default=8001, ge=0, le=65535)
    host: str = "127.0.0.1"
    pods: list[PodGroupSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_and_ports(self) -> Self:
        names = [g.name for g in self.pods]
        if len(set(names)) != len(names):
            raise ValueError(f"pod group names must be unique: {names}")
        total = sum(g.replicas for g in self.pods)
        if self.base_port and self.base_port + total - 1 > 65535:
            raise ValueError(f"{total} pods from base_port {self.base_port} run past port 65535")
        return self


class Endpoint(NamedTuple):
    name: str
    host: str
    port: int
    labels: dict[str, str]


def parse_fleet(data: Any, source: str = "<fleet>") -> FleetSpec:
    """Validate a fleet mapping; errors carry field paths such as `pods[1].gpu`."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, ["<root>: expected a mapping with a 'pods' list"])
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error)) from None


def load_fleet(path: str | Path) -> FleetSpec:
    return parse_fleet(read_yaml(path), str(path))


def _group_profile(group: PodGroupSpec, index: int, source: str) -> PodProfile:
    max_loras = group.max_loras if group.max_loras is not None else (1 if group.adapters else 0)
    try:
        return pod_profile(
            group.gpu,
            group.model,
            tp=group.tp,
            gpu_memory_utilization=group.gpu_memory_utilization,
            max_num_seqs=group.max_num_seqs,
            max_num_batched_tokens=group.max_num_batched_tokens,
            max_loras=max_loras,
            hourly_usd=group.hourly_usd,
        )
    except ConfigError as error:
        problems = [
            f"pods[{index}].{p}" if p.startswith(("gpu:", "model:")) else f"pods[{index}]: {p}"
            for p in error.problems
        ]
        raise ConfigError(source, problems) from None


def _replica_kv_transfer(group: PodGroupSpec, replica: int) -> KVTransferConfig | None:
    """The group's KV connector settings, with an engine id per replica (vLLM pods of one
    Deployment each draw their own)."""
    config = group.kv_transfer_config
    if config is None or group.replicas == 1:
        return config
    return config.model_copy(update={"engine_id": f"{config.engine_id}-{replica}"})


class EmulatedFleet:
    """The pods of a fleet spec; profiles are built (and validated) at construction."""

    def __init__(
        self,
        spec: FleetSpec | Mapping[str, Any],
        *,
        source: str = "<fleet>",
        tracing: Tracing | None = None,
    ) -> None:
        """`tracing`: every pod's `llm_request` spans (server.py), as vLLM's
        `--otlp-traces-endpoint` makes them."""
        self.spec = spec if isinstance(spec, FleetSpec) else parse_fleet(spec, source)
        self.pods: dict[str, EmulatedPod] = {}
        port = self.spec.base_port
        for index, group in enumerate(self.spec.pods):
            profile = _group_profile(group, index, source)
            served = group.served_model_name or profile.model.name
            labels = {
                POOL_LABEL: group.name,
                GPU_LABEL: profile.gpu.name,
                MODEL_LABEL: served,
                **group.labels,
            }
            for replica in range(group.replicas):
                name = group.name if group.replicas == 1 else f"{group.name}-{replica}"
                events = group.kv_events_config
                pod_labels = labels
                if events is not None and events.publishes:
                    events = events.model_copy(
                        update={
                            "endpoint": offset_endpoint(events.endpoint, replica),
                            "replay_endpoint": offset_endpoint(events.replay_endpoint, replica),
                        }
                    )
                    address = subscriber_address(events.endpoint, self.spec.host)
                    if address:
                        pod_labels = {**labels, KV_EVENTS_LABEL: address}
                self.pods[name] = EmulatedPod(
                    name,
                    profile,
                    served_model_name=served,
                    adapters=group.adapters,
                    host=self.spec.host,
                    port=port,
                    labels=pod_labels,
                    behavior=group.behavior,
                    kv_events=events,
                    hash_seed=group.hash_seed,
                    kv_transfer=_replica_kv_transfer(group, replica),
                    tracing=tracing,
                    tokenizer=group.tokenizer,
                    hash_algo=group.prefix_caching_hash_algo,
                )
                if port:
                    port += 1

    async def start(self) -> None:
        try:
            for pod in self.pods.values():
                await pod.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        await asyncio.gather(*(pod.stop() for pod in self.pods.values()))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop_pod(self, name: str) -> None:
        await self._pod(name).stop()

    async def start_pod(self, name: str) -> None:
        await self._pod(name).start()

    def _pod(self, name: str) -> EmulatedPod:
        try:
            return self.pods[name]
        except KeyError:
            raise KeyError(f"no pod named {name!r} (pods: {sorted(self.pods)})") from None

    @property
    def endpoints(self) -> list[Endpoint]:
        """Every pod, running or not (ports are final once the fleet has started)."""
        return [Endpoint(p.name, p.host, p.port, dict(p.labels)) for p in self.pods.values()]

    def endpoints_document(self) -> dict[str, Any]:
        return {
            "endpoints": [
                {"name": e.name, "address": e.host, "port": e.port, "labels": e.labels}
                for e in self.endpoints
            ]
        }

    def write_endpoints(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.endpoints_document(), sort_keys=False))

    def rows(self) -> list[list[str]]:
        """Per pod: name, URL, profile, KV tokens, KV blocks, LoRA slots and adapters."""
        return [
            [
                pod.name,
                pod.url,
                pod.profile.name,
                f"{pod.profile.kv_capacity_tokens:,}",
                f"{pod.profile.num_gpu_blocks:,}",
                f"{pod.profile.max_loras} slots: {', '.join(pod.adapters)}" if pod.adapters else "",
            ]
            for pod in self.pods.values()
        ]

    def describe(self) -> list[str]:
        """One line per pod: name, URL, profile, KV capacity, adapters."""
        lines = []
        for name, url, profile, tokens, blocks, adapters in self.rows():
            line = f"{name:<14} {url:<24} {profile:<28} KV {tokens:>9} tokens ({blocks} blocks)"
            lines.append(line + (f"  LoRA {adapters}" if adapters else ""))
        return lines
