"""Resolve `BACKENDS.yaml` entries to addresses, starting emulated pods where asked.

An `emulate:` entry becomes one emulated vLLM pod (`emulator/`) on an ephemeral loopback
port for the length of the run, so `igw bench backends examples/backends.yaml` compares
emulated H100, A10G and L4 backends with nothing else running. Its `hourly_usd` defaults
to the GPU profile's price and its model to the profile's served name.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

from inference_gateway.backend_bench.runner import Target
from inference_gateway.backend_bench.spec import BenchSpec
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.errors import ConfigError

__all__ = ["resolve_targets"]


def _pod_name(index: int) -> str:
    return f"backend-{index}"


def _fleet(groups: list[dict[str, Any]], backend_index: list[int]) -> EmulatedFleet | None:
    """The emulated pods; a bad GPU or model is reported at `backends[i].emulate`."""
    if not groups:
        return None
    try:
        return EmulatedFleet({"base_port": 0, "pods": groups}, source="backends")
    except ConfigError as error:
        problems = [
            re.sub(
                r"^pods\[(\d+)\]\.?",
                lambda m: f"backends[{backend_index[int(m.group(1))]}].emulate.",
                p,
            )
            for p in error.problems
        ]
        raise ConfigError(error.source, problems) from None


@contextlib.asynccontextmanager
async def resolve_targets(spec: BenchSpec) -> AsyncIterator[list[Target]]:
    """Yield one `Target` per backend, in file order; emulated pods stop on exit."""
    groups: list[dict[str, Any]] = [
        {
            "name": _pod_name(i),
            "gpu": b.emulate.gpu,
            "model": b.emulate.model,
            "behavior": b.emulate.behavior.model_dump(),
            **({"hourly_usd": b.hourly_usd} if b.hourly_usd is not None else {}),
        }
        for i, b in enumerate(spec.backends)
        if b.emulate is not None
    ]
    fleet = _fleet(groups, [i for i, b in enumerate(spec.backends) if b.emulate is not None])
    async with contextlib.AsyncExitStack() as stack:
        if fleet is not None:
            await stack.enter_async_context(fleet)
        targets = []
        for i, backend in enumerate(spec.backends):
            if backend.emulate is None:
                assert backend.base_url and backend.model and backend.hourly_usd is not None
                targets.append(Target(backend, backend.base_url, backend.model, backend.hourly_usd))
                continue
            assert fleet is not None
            pod = fleet.pods[_pod_name(i)]
            targets.append(
                Target(backend, pod.url + "/v1", pod.served_model_name, pod.profile.hourly_usd)
            )
        yield targets
