"""Tier 2: the global router over cluster gateways (`igw global`).

config    the YAML file: clusters, profiles and weights, store, rate limits
clusters  heartbeats (GET /status), drain on failure, ramp-back, held-request retries
drains    the operator's planned drain set (store or file): igw global drain / undrain
choice    filters and weighted scoring across clusters and regions
server    the OpenAI-compatible front: rate limit, forward, retry before streaming
metrics   Prometheus series and CloudWatch EMF fleet records
"""

from inference_gateway.frontends.global_router.config import (
    GlobalRouterSpec,
    load_router_config,
    parse_router_config,
)
from inference_gateway.frontends.global_router.server import GlobalRouter, build_global_router

__all__ = [
    "GlobalRouter",
    "GlobalRouterSpec",
    "build_global_router",
    "load_router_config",
    "parse_router_config",
]
