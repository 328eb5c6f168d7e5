"""The engine's two drivers agree: the same requests, sent to the same pods at the same
offsets, give the same TTFTs through the real-time HTTP emulator (measured by a streaming
client on loopback) as through the engine on a virtual clock, within 10% on average."""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp
import numpy as np

from inference_gateway.emulator.engine import Engine, EngineRequest
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.tokens import count_tokens

PODS = 2
FLEET = {
    "base_port": 0,
    "pods": [{"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": PODS}],
}


def workload(seed: int = 5) -> list[tuple[float, int, str, int]]:
    """(offset s, pod, prompt, output tokens): ~0.15-0.4 s prefills that overlap."""
    rnd = random.Random(seed)
    out, t = [], 0.0
    for i in range(24):
        t += rnd.expovariate(8.0)
        words = " ".join(f"w{i}x{j}" for j in range(rnd.randrange(3000, 8000)))
        out.append((t, i % PODS, words, rnd.randrange(8, 40)))
    return out


def virtual_ttfts(requests: list[tuple[float, int, str, int]]) -> list[float]:
    engines = [Engine(pod_profile("H100", "llama-3.1-8b")) for _ in range(PODS)]
    submitted = []
    for i, (t, pod, prompt, output) in enumerate(requests):
        engine = engines[pod]
        engine.advance(t)
        request = EngineRequest(i, count_tokens(prompt), output)
        engine.submit(request, t)
        submitted.append(request)
    for engine in engines:
        engine.advance(float("inf"))
    return [r.first_token_time - r.arrival for r in submitted]  # type: ignore[operator]


async def realtime_ttfts(requests: list[tuple[float, int, str, int]]) -> list[float]:
    ttfts = [0.0] * len(requests)
    async with EmulatedFleet(FLEET) as fleet, aiohttp.ClientSession() as session:
        ports = [e.port for e in fleet.endpoints]

        async def one(i: int, offset: float, pod: int, prompt: str, output: int) -> None:
            await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
            sent = time.perf_counter()
            body = {"model": "llama-3.1-8b", "prompt": prompt, "max_tokens": output, "stream": True}
            async with session.post(
                f"http://127.0.0.1:{ports[pod]}/v1/completions", json=body
            ) as response:
                assert response.status == 200
                async for line in response.content:
                    if line.startswith(b"data: "):
                        ttfts[i] = time.perf_counter() - sent
                        break
                await response.read()

        start = time.perf_counter()
        await asyncio.gather(*(one(i, *r) for i, r in enumerate(requests)))
    return ttfts


async def test_realtime_and_virtual_ttfts_agree() -> None:
    requests = workload()
    virtual = np.asarray(virtual_ttfts(requests))
    real = np.asarray(await realtime_ttfts(requests))
    assert virtual.min() > 0.05  # prefill dominates, not loopback overhead
    ratio = real.mean() / virtual.mean()
    print(
        f"\nmean TTFT real {real.mean():.3f} s, virtual {virtual.mean():.3f} s, ratio {ratio:.3f}"
    )
    assert abs(ratio - 1) <= 0.10
