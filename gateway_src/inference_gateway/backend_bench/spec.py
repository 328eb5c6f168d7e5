"""The `BACKENDS.yaml` file of `igw bench backends`: which endpoints, which prompts, how often.

::

    settings:                       # every key optional; defaults shown
      runs: 2                       # full passes; the second gives the run-to-run change
      throughput: {max_tokens: 64, repeats: 5}
      concurrency: [1, 4, 16]       # tokens/s against concurrency (1 is always measured)
      tool_calls: {cases: 20, concurrency: 4}
      determinism: {repeats: 5, max_tokens: 32}
      timeout_s: 120                # one request
    backends:
      - label: l4-vllm
        base_url: http://10.0.3.7:8000/v1
        model: meta-llama/Llama-3.1-8B-Instruct
        api_key_env: L4_API_KEY     # optional: the key is read from this variable
        hourly_usd: 0.8048
      - label: emulated-h100        # or an in-process emulated pod (no base_url)
        emulate: {gpu: H100, model: llama-3.1-8b}   # hourly_usd defaults to the profile's

Unknown keys are errors, reported with their field path (`backends[1].hourly_usd`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inference_gateway.config.spec import format_validation_error, read_yaml
from inference_gateway.emulator.behaviors import PodBehavior
from inference_gateway.errors import ConfigError

__all__ = [
    "BackendSpec",
    "BenchSettings",
    "BenchSpec",
    "DeterminismSettings",
    "EmulateSpec",
    "ThroughputSettings",
    "ToolCallSettings",
    "load_bench_spec",
    "parse_bench_spec",
]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThroughputSettings(_Spec):
    prompt: str = Field(
        default="Write a short paragraph about the history of the printing press.",
        min_length=1,
    )
    max_tokens: int = Field(default=64, ge=1, le=8192)
    repeats: int = Field(default=5, ge=1, le=1000)


class ToolCallSettings(_Spec):
    cases: int = Field(default=20, ge=1, le=20)
    concurrency: int = Field(default=4, ge=1, le=64)


class DeterminismSettings(_Spec):
    prompt: str = Field(default="List three prime numbers and explain why.", min_length=1)
    repeats: int = Field(default=5, ge=2, le=100)
    max_tokens: int = Field(default=32, ge=1, le=8192)


class BenchSettings(_Spec):
    runs: int = Field(default=2, ge=1, le=10)
    throughput: ThroughputSettings = ThroughputSettings()
    concurrency: list[int] = Field(default_factory=lambda: [1, 4, 16], min_length=1)
    tool_calls: ToolCallSettings = ToolCallSettings()
    determinism: DeterminismSettings = DeterminismSettings()
    timeout_s: float = Field(default=120, gt=0, le=3600)

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        if any(level < 1 or level > 1024 for level in levels):
            raise ValueError("concurrency levels must be between 1 and 1024")
        return sorted({1, *levels})


class EmulateSpec(_Spec):
    """An emulated pod started in-process on loopback for the run (see emulator/)."""

    gpu: str
    model: str = "llama-3.1-8b"
    behavior: PodBehavior = PodBehavior()


class BackendSpec(_Spec):
    label: str = Field(min_length=1, max_length=64)
    base_url: str | None = Field(default=None, pattern=r"^https?://")
    emulate: EmulateSpec | None = None
    model: str | None = None
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    hourly_usd: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.base_url is None) == (self.emulate is None):
            raise ValueError("give exactly one of base_url and emulate")
        if self.base_url is not None and (self.model is None or self.hourly_usd is None):
            raise ValueError("a base_url backend needs model and hourly_usd")
        return self


class BenchSpec(_Spec):
    settings: BenchSettings = BenchSettings()
    backends: list[BackendSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_labels(self) -> Self:
        labels = [b.label for b in self.backends]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"backend labels must be unique: {duplicates}")
        return self


def parse_bench_spec(data: Any, source: str = "<backends>") -> BenchSpec:
    if not isinstance(data, Mapping):
        raise ConfigError(source, ["<root>: expected a mapping with a 'backends' list"])
    try:
        return BenchSpec.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error)) from None


def load_bench_spec(path: str | Path) -> BenchSpec:
    return parse_bench_spec(read_yaml(path), str(path))
