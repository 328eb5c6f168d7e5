"""The asyncio gate around the flow controller: a released waiter holds its slot until
its handler resumes and picks a pod, so a second round cannot hand the slot out again."""

from __future__ import annotations

import asyncio

from inference_gateway.config import FlowControlSpec, SaturationSpec
from inference_gateway.dataplane.admission import PoolGate
from inference_gateway.scheduling import Endpoint, PodMetrics

SPEC = FlowControlSpec(saturation=SaturationSpec(critical_reserve_s=None))


async def test_released_waiter_holds_its_slot_until_it_resumes() -> None:
    pod = Endpoint("a", "h", 1, metrics=PodMetrics(), stale=False)
    pod.prefill_tokens, pod.prefill_s_per_token = 4000, 4e-5  # 160 ms queued: full
    gate = PoolGate(SPEC, lambda: [pod], tick_s=3600)  # pumped by hand below
    first = asyncio.create_task(gate.admit("standard", ""))
    await asyncio.sleep(0)
    assert gate.controller.queued("standard") == 1
    pod.prefill_tokens = 0  # the pod started what it had: room for one
    gate.pump()
    # the released request has not picked a pod yet: a newcomer finds no room
    assert gate.free_slots() == 0 and gate.slots().full("standard")
    await asyncio.wait_for(first, 1)
    assert gate.free_slots() == 1  # resumed: its pick (the caller's next step) counts now
    await gate.close()


async def test_cancelled_after_release_gives_the_slot_back() -> None:
    pod = Endpoint("a", "h", 1, metrics=PodMetrics(), stale=False)
    pod.prefill_tokens, pod.prefill_s_per_token = 4000, 4e-5
    gate = PoolGate(SPEC, lambda: [pod], tick_s=3600)
    waiter = asyncio.create_task(gate.admit("standard", ""))
    await asyncio.sleep(0)
    pod.prefill_tokens = 0
    gate.pump()
    waiter.cancel()  # the client hung up between release and resume
    await asyncio.gather(waiter, return_exceptions=True)
    assert gate.free_slots() == 1
    await gate.close()
