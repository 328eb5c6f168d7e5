"""Kubernetes-side sections of environment.yaml (owned by the cdk8s charts)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelServerSpec(_Section):
    """One vLLM Deployment: a pool on one GPU generation."""

    pool: str
    node_group: str
    image: str = "vllm/vllm-openai:v0.11.0"
    model: str = Field(description="Hugging Face id or path the server loads.")
    served_model_name: str | None = None
    replicas: int = Field(default=1, ge=0)
    gpus: int = Field(default=1, ge=1)
    max_model_len: int = Field(default=8192, ge=256)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    enable_prefix_caching: bool = True
    max_loras: int = Field(default=0, ge=0)
    adapters: list[str] = Field(default_factory=list)
    tool_call_parser: str | None = None


class CanaryTargetSpec(_Section):
    model: str
    weight: int = Field(ge=0)


class CanarySpec(_Section):
    """An InferenceModelRewrite: a client-facing name split onto target models."""

    name: str
    model: str
    targets: list[CanaryTargetSpec] = Field(min_length=1)
