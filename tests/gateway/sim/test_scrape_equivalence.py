"""The simulator's scrape equals what the picker would parse from the pod's `/metrics`.

The simulator skips the text round trip for speed; this test renders the emulator's
metric text for the same engine state and parses it with the gateway's vLLM adapter."""

from __future__ import annotations

from inference_gateway.core.endpoints.adapters import parse_metrics
from inference_gateway.emulator.engine import Engine, EngineRequest
from inference_gateway.emulator.metrics_text import PodMetrics as PodMetricsText
from inference_gateway.sim.pods import build_fleet, scrape
from inference_gateway.sim.scenario import PoolSpec


class _Quiet:
    def on_first_token(self, request: EngineRequest, time: float) -> None: ...
    def on_finish(self, request: EngineRequest, time: float) -> None: ...
    def on_step(self, time: float) -> None: ...


def test_sim_scrape_matches_parsed_metrics_text() -> None:
    pool = PoolSpec(
        name="a10g",
        gpu="A10G",
        model="llama-3.1-8b",
        replicas=1,
        max_loras=2,
        adapters=["sql", "support", "legal"],
    )
    pod = build_fleet([pool], _Quiet())[0]
    engine: Engine = pod.engine
    for i in range(40):  # more work than fits: waiting, running, adapters, KV use
        adapter = [None, "sql", "support", "legal"][i % 4]
        engine.submit(EngineRequest(i, 1500 + 37 * i, 200, (), adapter), i * 0.01)
    engine.advance(2.5)
    text = (
        PodMetricsText(
            model_name="llama-3.1-8b",
            snapshot=engine.snapshot,
            cache_info={"block_size": "16", "num_gpu_blocks": str(pod.profile.num_gpu_blocks)},
        )
        .render()
        .decode()
    )
    scrape(pod, 2.5)
    parsed = parse_metrics(text)
    simulated = pod.endpoint.metrics
    assert simulated is not None
    assert simulated.waiting == parsed.waiting > 0
    assert simulated.running == parsed.running > 0
    assert abs(simulated.kv_usage - parsed.kv_usage) < 1e-6 and parsed.kv_usage > 0
    assert simulated.running_adapters == parsed.running_adapters
    assert simulated.waiting_adapters == parsed.waiting_adapters
    assert simulated.max_loras == parsed.max_loras == 2
    assert simulated.num_gpu_blocks == parsed.num_gpu_blocks
