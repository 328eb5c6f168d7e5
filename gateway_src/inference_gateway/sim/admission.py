"""The gateway's admission control on the simulator's clock.

Wraps a scheduling policy with the same `FlowController` the HTTP gateway uses: while
the scraped view says every pod is saturated, sheddable requests are rejected, the
others wait in per-band queues and are dispatched in band order as capacity frees
(checked after every scrape and every finished request), or rejected when their band's
TTL passes.
"""

from __future__ import annotations

from typing import Any

from inference_gateway.config.spec import FlowControlSpec
from inference_gateway.core.traffic.flow_control import FlowController
from inference_gateway.sim.fleet import SimPod
from inference_gateway.sim.workload import SimRequest

__all__ = ["DEFERRED", "AdmissionPolicy"]

DEFERRED: Any = object()  # route() result: queued in the gateway, dispatched later


class AdmissionPolicy:
    def __init__(self, inner: Any, spec: FlowControlSpec) -> None:
        self.inner = inner
        self.name = inner.name
        self.needs_scrapes = True
        self.spec = spec
        self.controller = FlowController(spec)
        self.endpoints = [p.endpoint for p in inner.pods]
        self.rejected_by_band: dict[str, int] = {}

    def route(self, request: SimRequest, now: float) -> Any:
        slots = self.controller.slots(self.endpoints, now)
        decision = self.controller.offer(
            request.priority, "", now, saturated=slots.full(request.priority), handle=request
        )
        if decision.admitted:
            return self.inner.route(request, now)
        if decision.waiter is not None:
            return DEFERRED
        self._count(request)
        return None

    def drain(self, now: float) -> list[tuple[SimRequest, SimPod | None]]:
        """Requests leaving the queue now: with a pod, or `None` when their TTL passed."""
        if not self.controller.queued():
            return []
        out: list[tuple[SimRequest, SimPod | None]] = []
        for waiter in self.controller.expire(now):
            self._count(waiter.handle)
            out.append((waiter.handle, None))
        slots = self.controller.slots(self.endpoints, now)
        for waiter in self.controller.release(now, slots.take):
            out.append((waiter.handle, self.inner.route(waiter.handle, now)))
        return out

    def _count(self, request: SimRequest) -> None:
        band = request.priority
        self.rejected_by_band[band] = self.rejected_by_band.get(band, 0) + 1

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        self.inner.on_first_token(request, pod, ttft, now)

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        self.controller.on_completion(now)
        self.inner.on_finished(request, pod, now)
