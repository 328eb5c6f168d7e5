"""GPU and model profiles, loaded from the YAML data files beside this module.

The files hold every constant with its public source; this module only types them and
derives what vLLM derives at start-up: how many KV blocks fit, and the default batch
limits. Keeping numbers in data files lets a reviewer check each one against its source
without reading code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import format_validation_error
from ..errors import ConfigError

__all__ = [
    "BLOCK_SIZE",
    "GpuProfile",
    "ModelProfile",
    "PodProfile",
    "gpu_profiles",
    "model_profiles",
    "pod_profile",
]

BLOCK_SIZE = 16  # vLLM's CUDA default block size [D2]
GIB = 2**30


class GpuProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    dense_bf16_tflops: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    bandwidth_gbs: float = Field(gt=0)
    bandwidth_efficiency: float = Field(gt=0, le=1)
    mfu_prefill: float = Field(gt=0, le=1)
    mfu_decode: float = Field(gt=0, le=1)
    step_overhead_ms: float = Field(ge=0)
    allreduce_us_per_layer: float = Field(ge=0)
    non_kv_overhead_gib: float = Field(ge=0)
    max_num_batched_tokens: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0)
    hourly_usd: float = Field(ge=0)


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
    kv_bytes_per_token: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    lora_load_ms: float = Field(ge=0)
    default_tp: dict[str, int] = Field(default_factory=dict)


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


@dataclass(frozen=True, slots=True)
class PodProfile:
    """One model-server pod: a model on `tp` GPUs of one kind, with vLLM's settings.

    Derived fields follow vLLM's start-up arithmetic: KV memory per GPU is
    `memory × gpu_memory_utilization − weights/TP − non-KV overhead`, and blocks hold
    `BLOCK_SIZE` tokens of `kv_bytes_per_token / TP` bytes each.
    """

    gpu: GpuProfile
    model: ModelProfile
    tp: int
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
    kv_gib = g.memory_gib * gpu_memory_utilization - m.weight_gib / tp - g.non_kv_overhead_gib
    block_bytes = BLOCK_SIZE * m.kv_bytes_per_token / tp
    blocks = int(kv_gib * GIB // block_bytes) if kv_gib > 0 else 0
    if blocks < 64:
        raise ConfigError(
            "profile",
            [
                f"{model} on {tp}x {gpu}: only {max(kv_gib, 0):.2f} GiB left for KV cache; "
                "raise tp or gpu_memory_utilization"
            ],
        )
    batched = max_num_batched_tokens or g.max_num_batched_tokens
    return PodProfile(
        gpu=g,
        model=m,
        tp=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=min(max_num_seqs or g.max_num_seqs, batched),
        max_num_batched_tokens=batched,
        num_gpu_blocks=blocks,
        max_loras=max_loras,
        lora_load_s=m.lora_load_ms / 1000,
        hourly_usd=g.hourly_usd * tp if hourly_usd is None else hourly_usd,
    )
