"""What the fleet-tier packages export (a change here is an API change)."""

from __future__ import annotations

import inference_gateway.frontends.global_router as global_router
from inference_gateway.frontends.global_router import drains
from inference_gateway.shared_store import client, local_server, ratelimit


def test_public_names() -> None:
    assert set(global_router.__all__) == {
        "GlobalRouter",
        "GlobalRouterSpec",
        "build_global_router",
        "load_router_config",
        "parse_router_config",
    }
    assert set(client.__all__) == {
        "StoreHealth",
        "StoreSpec",
        "StoreUnavailable",
        "connect",
        "store_from_flag",
    }
    assert set(ratelimit.__all__) == {
        "DEFAULT_MAX_TOKENS",
        "Admission",
        "GlobalRateLimitSpec",
        "GlobalRateLimiter",
        "SharedLimits",
        "Ticket",
    }
    assert set(drains.__all__) == {
        "PlannedDrains",
        "drain_key",
        "read_drain_file",
        "write_drain_file",
    }
    assert set(local_server.__all__) == {"LocalRedis", "free_port"}
    for module in (global_router, client, ratelimit, local_server, drains):
        assert all(hasattr(module, name) for name in module.__all__)
