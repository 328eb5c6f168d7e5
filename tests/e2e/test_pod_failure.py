"""Pod failure on loopback: 8 emulated pods under steady streaming load, 2 killed mid-run
and restarted, the busiest first (at this load the picker may rightly send everything to
one or two pods it measured fast: killing only idle pods would test nothing). Nothing is
lost silently: a request the dead pod never took goes to another, one it had taken ends
with an OpenAI error (a 502 before the first chunk, never run twice) or, after its first
chunk, is resumed on another pod (docs/migration.md; the SSE error event where it cannot
be), and the restarted pods take traffic again within 2 s of their first good scrape.
The load loop is bounded in count and time."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.fleet import EmulatedFleet

FLEET = {
    "base_port": 0,
    "pods": [{"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 8}],
}
REQUESTS = 240
RATE = 40.0  # requests per second: 6 s of load


async def one(
    session: aiohttp.ClientSession,
    url: str,
    outcomes: Counter[str],
    targets: list[tuple[float, str]],
    i: int,
) -> None:
    # distinct prompts: identical ones would (rightly) stick to the pods that cache them
    body = {
        "model": "llama-3.1-8b",
        "prompt": f"story {i}: " + "tell me a story " * 20,
        "max_tokens": 40,
        "stream": True,
    }
    try:
        async with session.post(url + "/v1/completions", json=body) as response:
            if response.status in (429, 503):
                outcomes[f"clean_{response.status}"] += 1
                return
            if response.status == 502:  # the pod died after taking it: never run twice
                error = (await response.json())["error"]
                outcomes[f"clean_502_{error['code']}"] += 1
                return
            if response.status != 200:
                outcomes[f"status_{response.status}"] += 1
                return
            targets.append((time.monotonic(), response.headers["x-gateway-destination-endpoint"]))
            events = []
            async for line in response.content:
                if line.startswith(b"data: "):
                    events.append(line[6:].strip())
        if events and events[-1] == b"[DONE]":
            outcomes["ok"] += 1
        elif events and "error" in orjson.loads(events[-1]):
            outcomes["broken_with_error_event"] += 1
        else:
            outcomes["silently_truncated"] += 1
    except aiohttp.ClientError:
        outcomes["client_error"] += 1


async def test_killed_pods_lose_nothing_and_come_back(gateway_on: Callable[..., Any]) -> None:
    spec = parse_config({"scrape": {"intervalMs": 50, "stalenessMs": 1000, "timeoutMs": 500}})
    async with EmulatedFleet(FLEET) as fleet, gateway_on(fleet, config=spec) as (url, gw, _):
        victims: list[str] = []
        victim_ports: set[str] = set()
        outcomes: Counter[str] = Counter()
        targets: list[tuple[float, str]] = []
        async with aiohttp.ClientSession() as session:
            tasks = []
            start = time.monotonic()
            restarted_at = 0.0
            for i in range(REQUESTS):
                await asyncio.sleep(max(0.0, start + i / RATE - time.monotonic()))
                tasks.append(asyncio.create_task(one(session, url, outcomes, targets, i)))
                if i == REQUESTS // 4:
                    busiest = Counter(target.rsplit(":", 1)[1] for _, target in targets)
                    ports = [str(p.port) for p in fleet.pods.values()]
                    ranked = sorted(ports, key=lambda port: -busiest[port])  # stable: idle last
                    victim_ports = set(ranked[:2])
                    victims = [n for n, p in fleet.pods.items() if str(p.port) in victim_ports]
                    for name in victims:
                        await fleet.stop_pod(name)
                if i == REQUESTS // 2:
                    for name in victims:
                        await fleet.start_pod(name)
                    restarted_at = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        back = [e for e in gw.store.endpoints if str(e.port) in victim_ports]
        assert all(not e.stale for e in back)
        first_routed = min(
            t
            for t, target in targets
            if t > restarted_at and target.rsplit(":", 1)[1] in victim_ports
        )
        print(
            f"\noutcomes: {dict(outcomes)}; restarted pods routed "
            f"{first_routed - restarted_at:.2f} s after restart"
        )
    assert outcomes["silently_truncated"] == 0
    assert outcomes["client_error"] == 0
    assert sum(v for k, v in outcomes.items() if k.startswith("status_")) == 0
    # a 502 before the first chunk (the pod had the request, so it is never run twice)
    clean_502 = sum(v for k, v in outcomes.items() if k.startswith("clean_502_"))
    assert (
        outcomes["ok"]
        + outcomes["broken_with_error_event"]
        + clean_502
        + outcomes["clean_429"]
        + outcomes["clean_503"]
        == REQUESTS
    )
    assert outcomes["ok"] >= REQUESTS * 0.8
    assert first_routed - restarted_at <= 2.0 + 1.0  # first good scrape ≤ one staleness
