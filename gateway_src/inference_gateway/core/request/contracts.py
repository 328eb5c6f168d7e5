"""What both data planes share without depending on each other or on a web framework:
the scheduler interface they drive, the routing state a reload swaps, and the
OpenAI-shaped error body they answer with.

Kept apart from `proxy` (aiohttp) and `extproc` (gRPC), so the ext_proc picker never
imports `aiohttp.web` and the proxy never imports the Envoy protos.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import orjson

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest
from inference_gateway.core.traffic.ratelimit import RateLimiter
from inference_gateway.core.traffic.rewrites import RewriteSet
from inference_gateway.core.traffic.routing import ModelRouter

__all__ = ["RoutingState", "SchedulerLike", "openai_error"]


class SchedulerLike(Protocol):
    """What a data plane needs of a scheduler (the real one, or a baseline for comparison)."""

    def schedule(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]: ...
    def schedule_prefill(
        self, request: LLMRequest, endpoints: list[Endpoint], decode: Endpoint
    ) -> list[Endpoint] | None: ...
    def schedule_aggregated(
        self, request: LLMRequest, endpoints: list[Endpoint]
    ) -> list[Endpoint] | None: ...
    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None: ...
    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None: ...
    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None: ...


@dataclass(frozen=True)
class RoutingState:
    """Everything a reload replaces at once; a request keeps the state it started with."""

    config: GatewayConfigSpec | None
    router: ModelRouter
    rewrites: RewriteSet = field(default_factory=RewriteSet.empty)
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter([]))

    @classmethod
    def build(
        cls, config: GatewayConfigSpec | None, rewrites: RewriteSet | None = None
    ) -> RoutingState:
        return cls(
            config,
            ModelRouter(config),
            rewrites or RewriteSet.empty(),
            RateLimiter(config.rate_limits if config else []),
        )


def openai_error(message: str, kind: str, code: str | None, param: str | None = None) -> bytes:
    """`{"error": {"message", "type", "param", "code"}}`, as the OpenAI API answers errors
    (`param` names the offending request field, null when none)."""
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})
