"""The asyncio gate around the flow controller: a released waiter holds its slot until
its handler resumes and picks a pod, so a second round cannot hand the slot out again."""

from __future__ import annotations

import asyncio

from inference_gateway.config.spec import FlowControlSpec, SaturationSpec
from inference_gateway.core.request.admission import PoolGate
from inference_gateway.core.scheduling import Endpoint, PodMetrics

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


async def test_slots_freed_together_are_all_handed_out_without_waiting_for_the_ticker() -> None:
    """Two requests that finish in one event-loop turn free two slots. The first round
    releases one waiter (one per pod and round with the prefill term on: the next
    request's prefill is unknown until it is picked) and the second completion's round
    finds that waiter still in transit; the slot it freed must be handed out as soon as
    the waiter has picked its pod, not at the next tick. Before, it waited for the ticker
    (5 ms in `igw serve`), and at 64 requests in flight to a fast pod the gate handed
    out about one slot per tick: the closed-loop ceiling of bench/gateway_overhead.py."""
    spec = FlowControlSpec(
        saturation=SaturationSpec(noncritical_queue_threshold=5, critical_reserve_s=None)
    )
    pod = Endpoint("a", "h", 1, metrics=PodMetrics(), stale=False)
    pod.sent_requests = 5  # five in flight: full at queue_threshold 5
    gate = PoolGate(spec, lambda: [pod], tick_s=3600)  # the ticker never helps here
    admitted: list[int] = []

    async def request(number: int) -> None:
        await gate.admit("standard", "")
        pod.sent_requests += 1  # the pick, the caller's next step before it yields
        admitted.append(number)

    waiters = [asyncio.create_task(request(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert gate.controller.queued("standard") == 3
    for _ in range(2):  # two answers arrive in one turn: each ends its request
        pod.sent_requests -= 1
        gate.on_completion()

    async def two_admitted() -> None:
        while len(admitted) < 2:
            await asyncio.sleep(0)

    await asyncio.wait_for(two_admitted(), 1)
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(admitted) == 2 and gate.controller.queued("standard") == 1  # full again
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    await gate.close()
