"""Admission glue around the pure flow controller: one gate per pool, on any clock.

`PoolGate.offer` is the rule, with no waiting in it: admit now (`None`), queue (a
`Waiter` whose `handle` the driver sets), or raise `NoCapacityError` (429, with a
computed Retry-After); a wait past the band's TTL is `QueueTimeoutError` (503, with
Retry-After).
`pump` releases waiters as capacity frees and expires those past their band's TTL,
resolving each handle with `set_result(True | False)`; a released waiter is *in
transit* and holds a slot until its driver resumes it and it picks a pod (the picker's
bookkeeping then counts it), so two rounds never hand out the same slot; `resumed`
ends the transit and, when a round that ran meanwhile left waiters queued (it saw the
slots in transit as taken), asks for another round soon (`soon`).

Two drivers, one rule: `admit` is the asyncio one (`igw serve`, `igw picker`): the
handle is a future, a ticker pumps while anyone waits, a cancelled handler (the client
went away) leaves the queue at once, `soon` is the loop's `call_soon`. The simulator
passes its virtual clock and its own `soon`, resumes waiters itself and pumps after
every engine step and scrape (its ticker).

Scale from zero: a pool with no ready pod counts as saturated, so a request of a band
that queues is held in that queue (where `inference_extension_flow_control_queue_size`,
the metric KEDA scales the pool on, counts it) and released, by the same ticker, to the
first pod that becomes ready; past the band's TTL it ends `QueueTimeoutError` (503 with
`Retry-After`). A band that does not queue (sheddable by default) and a `FailOpen` pool
(`hold_empty=False`) go on at once, so scheduling answers 503 or picks at random. This is
upstream's rule: GIE's saturation detector reports a pool without pods as saturated and
its flow controller holds requests up to their TTL (llm-d's scale-from-zero buffering
rests on it, kubernetes-sigs/gateway-api-inference-extension `pkg/epp/flowcontrol`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from inference_gateway.background import cancel_and_wait
from inference_gateway.config.spec import FlowControlSpec
from inference_gateway.core.request import refusals
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.flow_control import FlowController, SlotCounter, Waiter
from inference_gateway.errors import InferenceGatewayError, NoCapacityError

__all__ = ["PoolGate", "QueueTimeoutError"]


class QueueTimeoutError(InferenceGatewayError):
    """The request waited its band's whole TTL without capacity (→ 503 with Retry-After);
    `empty`: the pool still had no ready pod (a scale from zero that took too long)."""

    def __init__(self, message: str, retry_after_s: int, *, empty: bool = False) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.empty = empty


class PoolGate:
    def __init__(
        self,
        spec: FlowControlSpec,
        endpoints: Callable[[], list[Endpoint]],
        *,
        tick_s: float = 0.005,
        clock: Callable[[], float] = time.monotonic,
        soon: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        """`soon(f)` runs `f` after the current step (default: the running loop's
        `call_soon`)."""
        self.controller = FlowController(spec)
        self.spec = spec
        self.endpoints = endpoints
        self.tick_s = tick_s
        self.clock = clock
        self.soon = soon or (lambda f: asyncio.get_running_loop().call_soon(f))
        self._ticker: asyncio.Task[None] | None = None
        self._in_transit = 0  # released, handler not resumed yet (no pod picked)
        self._held_back = False  # a round left waiters queued while others were in transit

    def slots(self) -> SlotCounter:
        return self.controller.slots(self.endpoints(), self.clock(), self._in_transit)

    def free_slots(self) -> int:
        """Requests the pool takes before it saturates again (non-critical bands)."""
        return self.slots().normal

    def pool_waiting(self) -> int:
        return sum(e.metrics.waiting for e in self.endpoints() if e.metrics and not e.stale)

    def has_ready(self) -> bool:
        return any(not e.stale for e in self.endpoints())

    def offer(self, band: str, fairness_id: str, *, hold_empty: bool = True) -> Waiter | None:
        """Admit now (None), or queue: the returned waiter's `handle` (set by the
        caller) gets `set_result(True)` when released, `set_result(False)` when its
        band's TTL passes; raises `NoCapacityError` when refused.

        A pool with no ready pod holds the request in its band's queue until one is
        ready (scale from zero); with `hold_empty` False (a FailOpen pool), or for a band
        that does not queue, the request goes on at once and scheduling answers.
        """
        now = self.clock()
        endpoints = self.endpoints()
        empty = not any(not e.stale for e in endpoints)
        if empty and not hold_empty:
            return None
        saturated = empty or self.controller.full(band, endpoints, now, self._in_transit)
        decision = self.controller.offer(band, fairness_id, now, saturated)
        if decision.admitted:
            return None
        if decision.waiter is None:
            if empty:
                return None  # nothing to hold it in: scheduling answers 503 at once
            retry = self.controller.retry_after(now, self.pool_waiting())
            raise NoCapacityError(refusals.saturated_text(decision.reason, retry), retry)
        return decision.waiter

    def resumed(self, waiter: Waiter, released: bool) -> None:
        """The waiter's driver resumed it (released: it picks a pod before anything else
        runs) or gave up on it (expired, cancelled): it leaves the queue and transit."""
        if released:
            self._in_transit -= 1
            if self._held_back:
                # a round that found this waiter in transit handed out nothing for the
                # slots it saw free: look again once the pick is counted, not at the tick
                self._held_back = False
                self.soon(self.pump)
        self.controller.cancel(waiter)

    def timeout_error(self, band: str) -> QueueTimeoutError:
        """What a waiter whose band's TTL passed answers."""
        ttl = self.controller.bands[band].ttl_s
        empty = not self.has_ready()
        return QueueTimeoutError(
            refusals.queue_timeout_text(band, ttl, empty=empty),
            self.controller.retry_after(self.clock(), self.pool_waiting()),
            empty=empty,
        )

    async def admit(self, band: str, fairness_id: str, *, hold_empty: bool = True) -> None:
        """Return when the request may go on to scheduling (raises 429 / 503 errors)."""
        waiter = self.offer(band, fairness_id, hold_empty=hold_empty)
        if waiter is None:
            return
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiter.handle = future
        self._ensure_ticker()
        try:
            admitted = await future
        finally:
            self.resumed(waiter, future.done() and not future.cancelled() and future.result())
        if not admitted:
            raise self.timeout_error(waiter.band)

    def on_completion(self) -> None:
        self.controller.on_completion(self.clock())
        self.pump()

    def pump(self) -> None:
        """Release what capacity allows, expire what waited too long."""
        if not self.controller.queued():
            return  # every completion pumps; with nobody waiting there is nothing to do
        now = self.clock()
        for waiter in self.controller.expire(now):
            if not waiter.handle.done():
                waiter.handle.set_result(False)
        slots = self.slots()
        in_transit = self._in_transit
        for waiter in self.controller.release(now, slots.take):
            if not waiter.handle.done():
                waiter.handle.set_result(True)
                self._in_transit += 1
        if in_transit and self.controller.queued():
            self._held_back = True  # the slots held in transit may have kept these waiting

    def _ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while self.controller.queued():
            await asyncio.sleep(self.tick_s)
            self.pump()

    async def close(self) -> None:
        await cancel_and_wait(self._ticker)
