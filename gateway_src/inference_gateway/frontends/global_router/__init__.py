"""Tier 2: the global router over cluster gateways (`igw global`).

clusters  the status poller (GET /status of every cluster) that feeds the registry
drains    the operator's planned drain set (store or file): igw global drain / undrain
requests  the router's request helpers: authentication, latency budget
explain   igw.route's ranking with every signal behind it
server    the OpenAI-compatible front: rate limit, forward, retry before streaming

What the router shares with the simulator's fleet tier lives outside this room: its
config (`config/global_router.py`), its cluster registry (health, drain, ramp-back:
`core/scheduling/cluster_registry.py`) and choice (`core/scheduling/cluster_choice.py`),
and its metrics (`telemetry/global_metrics.py`).
"""

from inference_gateway.config.global_router import (
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
