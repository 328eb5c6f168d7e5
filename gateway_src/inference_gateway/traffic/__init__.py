"""Model routing, canary splits, priority bands, admission and rate limits (no I/O)."""

from .flow_control import FlowController
from .objectives import band_for
from .ratelimit import RateLimiter
from .rewrites import RewriteSet, load_rewrites, parse_rewrites
from .routing import ModelRouter, Route

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
