"""A round-robin stand-in for the scheduler: what a Kubernetes Service does. The demo
and benchmarks run it through the same proxy, so only the routing decision differs."""

from __future__ import annotations

import itertools

from inference_gateway.core.scheduling.filters import eligible
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest
from inference_gateway.errors import NoEndpointError

__all__ = ["RoundRobinScheduler"]


class RoundRobinScheduler:
    def __init__(self) -> None:
        self._counter = itertools.count()

    def schedule(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        candidates = eligible(request, endpoints)
        if not candidates:
            raise NoEndpointError(f"no ready endpoint serves model {request.model!r}")
        start = next(self._counter) % len(candidates)
        return candidates[start:] + candidates[:start]

    def schedule_prefill(
        self, request: LLMRequest, endpoints: list[Endpoint], decode: Endpoint
    ) -> list[Endpoint] | None:
        return None  # a Service knows no roles: every pod serves the whole request

    def schedule_aggregated(
        self, request: LLMRequest, endpoints: list[Endpoint]
    ) -> list[Endpoint] | None:
        return None

    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        return None

    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None:
        return None

    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        return None
