"""GPU, instance and model profiles, loaded from the YAML data files beside this module.

The files hold every constant with its public source; this module only types them and
derives what vLLM derives at start-up: how many KV blocks fit in a tensor-parallel group,
and the default batch limits. Keeping numbers in data files lets a reviewer check each one
against its source without reading code. A model that does not fit a shape is refused with
the arithmetic in the message, never silently shrunk.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inference_gateway.config.spec import format_validation_error
from inference_gateway.errors import ConfigError

__all__ = [
    "BLOCK_SIZE",
    "GpuProfile",
    "InstanceProfile",
    "ModelProfile",
    "PodProfile",
    "gpu_profiles",
    "instance_for",
    "instance_profiles",
    "model_for_repo",
    "model_profiles",
    "pod_profile",
]

BLOCK_SIZE = 16  # vLLM's CUDA default block size [D2]
GIB = 2**30
MIN_BLOCKS = 64  # fewer KV blocks than this cannot serve one long request: refuse the pod


class GpuProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    dense_bf16_tflops: float = Field(gt=0)
    dense_fp8_tflops: float | None = Field(default=None, gt=0)
    memory_gib: float = Field(gt=0)
    bandwidth_gbs: float = Field(gt=0)
    bandwidth_efficiency: float = Field(gt=0, le=1)
    mfu_prefill: float = Field(gt=0, le=1)
    mfu_decode: float = Field(gt=0, le=1)
    step_overhead_ms: float = Field(ge=0)
    non_kv_overhead_gib: float = Field(ge=0)
    max_num_batched_tokens: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0)
    hourly_usd: float = Field(ge=0)


class InstanceProfile(BaseModel):
    """An instance shape: how many GPUs of one kind share an interconnect (one TP group at
    most spans one instance)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    gpu: str
    gpus: int = Field(ge=1)
    interconnect: str
    allreduce_busbw_gbs: float = Field(gt=0)
    allreduce_latency_us: float = Field(ge=0)
    hourly_usd: float = Field(ge=0)
    #: the instance's network bandwidth, Gbit/s (EFA where it has it): what a KV transfer
    #: between two nodes gets (emulator/kvtransfer.py)
    network_gbps: float = Field(default=10, gt=0)


class ModelProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    params_b: float = Field(gt=0)
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    q_heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    weight_gib: float = Field(gt=0)
    weight_dtype: Literal["bf16", "fp8"] = "bf16"
    kv_bytes_per_token: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    lora_load_ms: float = Field(ge=0)
    default_tp: dict[str, int] = Field(default_factory=dict)
    active_params_b: float | None = Field(default=None, gt=0)
    experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    expert_weight_gib: float = Field(default=0, ge=0)
    #: Hugging Face repositories of this shape, as `vllm serve` names the model
    hf_repos: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _experts_consistent(self) -> ModelProfile:
        if (self.experts > 0) != (self.experts_per_token > 0) or (
            self.experts_per_token > self.experts
        ):
            raise ValueError("experts, experts_per_token: both 0, or 0 < per token <= experts")
        if self.expert_weight_gib >= self.weight_gib:
            raise ValueError("expert_weight_gib must be below weight_gib")
        if (self.experts > 0) != (self.expert_weight_gib > 0):
            raise ValueError("expert_weight_gib is set exactly when experts is")
        return self

    @property
    def compute_params_b(self) -> float:
        """Parameters one token multiplies by: the active ones for a mixture of experts."""
        return self.active_params_b or self.params_b

    def kv_heads_per_gpu(self, tp: int) -> int:
        """vLLM splits KV heads across the TP group and replicates them when TP exceeds
        their number (each GPU keeps at least one)."""
        return max(1, self.kv_heads // tp)

    def kv_bytes_per_token_per_gpu(self, tp: int) -> int:
        return self.kv_bytes_per_token * self.kv_heads_per_gpu(tp) // self.kv_heads


def _load(filename: str, model: type[BaseModel]) -> dict[str, Any]:
    text = resources.files(__package__).joinpath("profiles").joinpath(filename).read_text()
    out = {}
    for name, fields in (yaml.safe_load(text) or {}).items():
        try:
            out[name] = model.model_validate({"name": name, **fields})
        except ValidationError as error:
            raise ConfigError(filename, format_validation_error(error, name)) from None
    return out


@functools.cache
def gpu_profiles() -> dict[str, GpuProfile]:
    return _load("gpus.yaml", GpuProfile)


@functools.cache
def model_profiles() -> dict[str, ModelProfile]:
    return _load("models.yaml", ModelProfile)


def model_for_repo(repo_id: str) -> str | None:
    """The model profile whose `hf_repos` list `repo_id` (vLLM's model argument)."""
    return next((m.name for m in model_profiles().values() if repo_id in m.hf_repos), None)


@functools.cache
def instance_profiles() -> dict[str, InstanceProfile]:
    return _load("instances.yaml", InstanceProfile)


def instance_for(gpu: str, tp: int) -> InstanceProfile:
    """The smallest listed instance of `gpu` with at least `tp` GPUs (a TP group never
    spans instances); a ConfigError naming the largest one when none is big enough. A GPU
    no listed instance carries (a reference part of the speed check) gets a one-GPU
    shape of its own, at TP 1 only."""
    shapes = sorted((i for i in instance_profiles().values() if i.gpu == gpu), key=lambda i: i.gpus)
    if not shapes and tp == 1:  # a GPU sold in no listed instance (a reference part)
        return InstanceProfile(
            name=f"1x {gpu}",
            gpu=gpu,
            gpus=1,
            interconnect="none",
            allreduce_busbw_gbs=1,
            allreduce_latency_us=0,
            hourly_usd=gpu_profiles()[gpu].hourly_usd,
        )
    for shape in shapes:
        if shape.gpus >= tp:
            return shape
    largest = f"{shapes[-1].name} has {shapes[-1].gpus}" if shapes else "no instance is listed"
    raise ConfigError(
        "profile",
        [f"tp {tp} on {gpu}: a TP group stays inside one instance, and {largest} GPUs"],
    )


@dataclass(frozen=True, slots=True)
class PodProfile:
    """One model-server pod: a model on `tp` GPUs of one kind, with vLLM's settings.

    Derived fields follow vLLM's start-up arithmetic: KV memory per GPU is
    `memory × gpu_memory_utilization − weights/TP − non-KV overhead`, and a block holds
    `BLOCK_SIZE` tokens of the GPU's share of the KV heads (`kv_heads_per_gpu`); every GPU
    of the group holds the same blocks, so the group's capacity is one GPU's block count.
    """

    gpu: GpuProfile
    model: ModelProfile
    tp: int
    instance: InstanceProfile
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    num_gpu_blocks: int
    max_loras: int
    lora_load_s: float
    hourly_usd: float

    @property
    def name(self) -> str:
        return f"{self.gpu.name}/{self.model.name}/tp{self.tp}"

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * BLOCK_SIZE


def pod_profile(
    gpu: str,
    model: str,
    *,
    tp: int | None = None,
    gpu_memory_utilization: float = 0.9,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_loras: int = 0,
    hourly_usd: float | None = None,
) -> PodProfile:
    """Build a pod profile; unknown names and a model that does not fit are ConfigErrors."""
    gpus, models = gpu_profiles(), model_profiles()
    if gpu not in gpus:
        raise ConfigError("gpu", [f"gpu: unknown GPU profile {gpu!r} (known: {sorted(gpus)})"])
    if model not in models:
        raise ConfigError(
            "model", [f"model: unknown model profile {model!r} (known: {sorted(models)})"]
        )
    g, m = gpus[gpu], models[model]
    tp = tp or m.default_tp.get(gpu, 1)
    instance = instance_for(gpu, tp)
    usable = g.memory_gib * gpu_memory_utilization
    weights = m.weight_gib / tp
    kv_gib = usable - weights - g.non_kv_overhead_gib
    block_bytes = BLOCK_SIZE * m.kv_bytes_per_token_per_gpu(tp)
    blocks = int(kv_gib * GIB // block_bytes) if kv_gib > 0 else 0
    if blocks < MIN_BLOCKS:
        raise ConfigError(
            "profile",
            [
                f"{model} on {tp}x {gpu} ({instance.name}) does not fit: per GPU "
                f"{g.memory_gib:.2f} GiB x {gpu_memory_utilization:.2f} = {usable:.2f} GiB, "
                f"minus weights {m.weight_gib:.2f} / {tp} = {weights:.2f} GiB, minus non-KV "
                f"{g.non_kv_overhead_gib:.2f} GiB, leaves {kv_gib:.2f} GiB for KV cache; "
                f"{MIN_BLOCKS} blocks of {block_bytes / 2**20:.2f} MiB need "
                f"{MIN_BLOCKS * block_bytes / GIB:.2f} GiB. Raise tp (up to "
                f"{_largest(gpu)} on {gpu}), use a smaller or quantised model, or raise "
                "gpu_memory_utilization"
            ],
        )
    batched = max_num_batched_tokens or g.max_num_batched_tokens
    return PodProfile(
        gpu=g,
        model=m,
        tp=tp,
        instance=instance,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=min(max_num_seqs or g.max_num_seqs, batched),
        max_num_batched_tokens=batched,
        num_gpu_blocks=blocks,
        max_loras=max_loras,
        lora_load_s=m.lora_load_ms / 1000,
        hourly_usd=instance.hourly_usd * tp / instance.gpus if hourly_usd is None else hourly_usd,
    )


def _largest(gpu: str) -> int:
    return max((i.gpus for i in instance_profiles().values() if i.gpu == gpu), default=1)
