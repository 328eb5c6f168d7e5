"""Fixtures: emulated vLLM pods on loopback and a picker factory in front of them."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from inference_gateway.assembly.picker import TRANSPORTS, PickerServer, build_picker
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.rewrites import RewriteSet
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.frontends.extproc.picker import PickerOptions

# The tests import the fake Envoy beside them as a plain module (no package here).
sys.path.insert(0, str(Path(__file__).parent))

from fake_envoy import PickerFactory

FLEET = {
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
        },
    ],
}


@pytest.fixture
async def fleet() -> AsyncIterator[EmulatedFleet]:
    async with EmulatedFleet(FLEET) as fleet:
        yield fleet


def fleet_endpoints(fleet: EmulatedFleet) -> list[Endpoint]:
    return [
        Endpoint(e.name, e.host, e.port, pool="p", labels=e.labels, index=i)
        for i, e in enumerate(fleet.endpoints)
    ]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """Every picker test runs on both gRPC servers: ours (http2) and grpc.aio."""
    return str(request.param)


@pytest.fixture
async def make_picker(fleet: EmulatedFleet, transport: str) -> AsyncIterator[PickerFactory]:
    started: list[PickerServer] = []

    async def make(
        config: dict[str, Any] | GatewayConfigSpec | None = None,
        *,
        rewrites: RewriteSet | None = None,
        options: PickerOptions | None = None,
        endpoints: list[Endpoint] | None = None,
        **kwargs: Any,
    ) -> PickerServer:
        spec = parse_config(config) if isinstance(config, dict) else config
        kwargs.setdefault("transport", transport)
        picker = build_picker(
            endpoints if endpoints is not None else fleet_endpoints(fleet),
            spec,
            rewrites=rewrites,
            options=options,
            host="127.0.0.1",
            grpc_port=0,
            metrics_port=kwargs.pop("metrics_port", None),
            **kwargs,
        )
        await picker.start()
        started.append(picker)
        return picker

    yield make
    for picker in started:
        await picker.stop(grace_s=0)
