"""`igw demo --dataplane envoy`: the demo's trace through real Envoy, both policies."""

from __future__ import annotations

from inference_gateway.demo.envoy import run_envoy_policies
from inference_gateway.demo.run import make_trace
from inference_gateway.emulator.fleet import EmulatedFleet

FLEET = {
    "base_port": 0,
    "pods": [
        {"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 1},
        {"name": "a10g", "gpu": "A10G", "model": "llama-3.1-8b", "replicas": 1},
    ],
}


async def test_the_demo_trace_runs_through_envoy_with_and_without_the_picker() -> None:
    trace = make_trace(duration=3.0, rate=3.0, seed=1)[:8]
    async with EmulatedFleet(FLEET) as fleet:
        outcomes = await run_envoy_policies(fleet, trace)
    assert list(outcomes) == ["envoy+picker", "envoy-round-robin"]
    for outcome in outcomes.values():
        assert outcome.errors == 0
        assert len(outcome.ttft) == len(trace) and outcome.tokens > 0
