"""Model routing, canary splits, priority bands, admission, rate limits (the store's seen
through the view defined here) and the one Retry-After policy (no I/O)."""

from inference_gateway.core.traffic.flow_control import FlowController
from inference_gateway.core.traffic.objectives import band_for
from inference_gateway.core.traffic.ratelimit import RateLimiter
from inference_gateway.core.traffic.rewrites import RewriteSet, load_rewrites, parse_rewrites
from inference_gateway.core.traffic.routing import ModelRouter, Route

__all__ = [
    "FlowController",
    "ModelRouter",
    "RateLimiter",
    "RewriteSet",
    "Route",
    "band_for",
    "load_rewrites",
    "parse_rewrites",
]
