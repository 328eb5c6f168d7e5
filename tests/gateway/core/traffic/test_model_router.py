"""`ModelRouter.candidates`: a list's pods grouped by pool once, and regrouped when a
reload moves pods between pools (`Core.apply_config` publishes a new list)."""

from __future__ import annotations

from inference_gateway.assembly.core import build_core
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.rewrites import RewriteSet
from inference_gateway.core.traffic.routing import ModelRouter, Route


def pods() -> list[Endpoint]:
    return [
        Endpoint("a", "10.0.0.1", 8000, pool="x"),
        Endpoint("b", "10.0.0.2", 8000, pool="y"),
        Endpoint("c", "10.0.0.3", 8000, pool="x"),
    ]


def test_candidates_are_the_routes_pool_in_list_order() -> None:
    router = ModelRouter()
    listed = pods()
    assert [e.name for e in router.candidates(Route("m", "x", None, None), listed)] == [
        "a",
        "c",
    ]
    assert [e.name for e in router.candidates(Route("m", "y", None, None), listed)] == ["b"]
    assert router.candidates(Route("m", "z", None, None), listed) == []
    assert router.candidates(Route("m", None, None, None), listed) is listed


def test_a_new_list_is_grouped_anew() -> None:
    """Discovery publishes a new list when pods come, go or change pools."""
    router = ModelRouter()
    route = Route("m", "x", None, None)
    assert len(router.candidates(route, pods())) == 2
    moved = pods()
    moved[1].pool = "x"
    assert [e.name for e in router.candidates(route, moved)] == ["a", "b", "c"]


async def test_a_reload_that_moves_a_pod_between_pools_moves_its_requests() -> None:
    """A static list keeps its Endpoint objects across reloads and `assign_pools` moves
    them in place; the reload publishes a new list, so no router (the new one, nor the
    old one a queued request still holds) answers from groups made before the move."""

    def config(selector: dict[str, str]) -> GatewayConfigSpec:
        return parse_config(
            {
                "pools": [{"name": "x", "selector": selector}, {"name": "y"}],
                "models": [{"name": "mx", "pool": "x"}, {"name": "my", "pool": "y"}],
            }
        )

    static = [
        Endpoint("a", "10.0.0.1", 8000, labels={"gpu": "h100", "igw.dev/pool": "y"}),
        Endpoint("b", "10.0.0.2", 8000, labels={"gpu": "l4", "igw.dev/pool": "y"}),
    ]
    for e in static:
        e.pool = e.labels.get("igw.dev/pool", "")
    core = build_core(static, config({"gpu": "h100"}), scrape=False)
    try:
        old = core.director.state.router
        to_x = old.route("mx", core.store.endpoints)
        assert [e.name for e in old.candidates(to_x, core.store.endpoints)] == ["a"]

        core.apply_config(config({"app": "any"}), RewriteSet.empty())
        new = core.director.state.router
        to_y = new.route("my", core.store.endpoints)
        assert [e.name for e in new.candidates(to_y, core.store.endpoints)] == ["a", "b"]
        assert old.candidates(to_x, core.store.endpoints) == []
    finally:
        await core.close()


def test_fail_open_pools_come_from_the_config() -> None:
    spec = parse_config(
        {"pools": [{"name": "open", "failureMode": "FailOpen"}, {"name": "closed"}]}
    )
    assert ModelRouter(spec).fail_open_pools == frozenset({"open"})
    assert ModelRouter().fail_open_pools == frozenset()
