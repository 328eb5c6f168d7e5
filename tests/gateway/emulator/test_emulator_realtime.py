"""The real-time driver delivers the engine's timeline on the wall clock."""

from __future__ import annotations

import asyncio
import time

import pytest

from inference_gateway.emulator.engine import EngineRequest
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.realtime import PodStoppedError, RealtimeDriver


async def test_wall_clock_ttft_matches_the_engine_model() -> None:
    driver = RealtimeDriver(pod_profile("A10G", "llama-3.1-8b"))
    request = EngineRequest(request_id=1, prompt_tokens=1000, output_tokens=10)
    start = time.monotonic()
    ticket = driver.submit(request)
    while request.generated(driver.engine.clock) == 0:
        await driver.next_step()
    seen = time.monotonic() - start
    assert request.first_token_time is not None
    modelled = request.first_token_time - request.arrival
    assert modelled > 0.3  # 1,000 prompt tokens on an A10G
    assert seen == pytest.approx(modelled, abs=0.02)
    await ticket.done
    assert request.finish_time is not None
    assert time.monotonic() - start == pytest.approx(
        request.finish_time - request.arrival, abs=0.03
    )


async def test_streams_wake_once_per_step_not_per_token() -> None:
    driver = RealtimeDriver(pod_profile("H100", "llama-3.1-8b"), max_segment_s=0.02)
    request = EngineRequest(request_id=1, prompt_tokens=16, output_tokens=150)
    driver.submit(request)
    wakeups = 0
    while request.finish_time is None:
        await driver.next_step()
        wakeups += 1
    assert wakeups < 150 / 2  # decode segments of ~20 ms carry ~3 tokens each


async def test_close_fails_everything_in_flight() -> None:
    driver = RealtimeDriver(pod_profile("H100", "llama-3.1-8b"))
    ticket = driver.submit(EngineRequest(request_id=1, prompt_tokens=16, output_tokens=10_000))
    waiter = asyncio.ensure_future(driver.next_step())
    await asyncio.sleep(0)
    driver.close()
    with pytest.raises(PodStoppedError):
        await ticket.done
    with pytest.raises(PodStoppedError):
        await waiter
    with pytest.raises(PodStoppedError):
        driver.submit(EngineRequest(request_id=2, prompt_tokens=16, output_tokens=1))
