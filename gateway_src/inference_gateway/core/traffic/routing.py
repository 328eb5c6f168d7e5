"""Body-based model routing: the request's `model` picks a pool and a profile.

With a config, each model names its pool, and its LoRA adapters map to the same pool.
Without one, every model name a pod lists in `/v1/models` is served by the pods that
list it (the `latency` profile), so `igw serve --endpoints FILE` works out of the box.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.errors import UnknownModelError

__all__ = ["ModelRouter", "Route"]


@dataclass(frozen=True, slots=True)
class Route:
    model: str  # name sent to the pod
    pool: str | None  # None: any pod that serves `model`
    adapter: str | None
    profile: str | None


class ModelRouter:
    """Routes and candidates under one config (a reload makes a new router).

    `candidates` groups a list's pods by pool once, on its first call with that list,
    and answers later calls with the same list from the groups: at 100 pools that
    spares a pass over every pod twice a request (admission and ranking). It relies on
    one rule: a list's pods keep their pools. Discovery publishes a new list when pods
    come or go, and a reload that moves pods between pools publishes a new one too
    (`Core.apply_config`).
    """

    def __init__(self, config: GatewayConfigSpec | None = None) -> None:
        self.config = config
        self._routes: dict[str, Route] = {}
        self.fail_open_pools = frozenset(
            p.name for p in (config.pools if config else ()) if p.failure_mode == "FailOpen"
        )
        self._grouped: list[Endpoint] | None = None  # the list `_by_pool` groups
        self._by_pool: dict[str, list[Endpoint]] = {}
        if config is not None:
            for m in config.models:
                self._routes[m.name] = Route(m.name, m.pool, None, m.profile)
                for adapter in m.adapters:
                    self._routes[adapter] = Route(adapter, m.pool, adapter, m.profile)

    def route(self, model: str, endpoints: list[Endpoint]) -> Route:
        route = self._routes.get(model)
        if route is not None:
            return route
        if self.config is None or not self.config.models:
            for e in endpoints:
                if model in e.models:
                    base = e.labels.get("igw.dev/model")
                    adapter = model if base and base != model else None
                    return Route(model, None, adapter, None)
            if any(not e.models for e in endpoints):
                # some pods have not told us their models yet: not a 404, scheduling
                # answers 503 unless one of them is ready
                return Route(model, None, None, None)
        raise UnknownModelError(model)

    def candidates(self, route: Route, endpoints: list[Endpoint]) -> list[Endpoint]:
        """The pods of the route's pool (all of `endpoints` for a route without one).
        The list returned is shared: callers read it and never change it."""
        if route.pool is None:
            return endpoints
        if endpoints is not self._grouped:
            by_pool: dict[str, list[Endpoint]] = {}
            for e in endpoints:
                by_pool.setdefault(e.pool, []).append(e)
            self._by_pool, self._grouped = by_pool, endpoints
        return self._by_pool.get(route.pool, [])

    def models(self, endpoints: list[Endpoint]) -> list[str]:
        """What `/v1/models` lists: configured names, else everything the pods serve."""
        if self.config is not None and self.config.models:
            return sorted(self._routes)
        return sorted({m for e in endpoints for m in e.models})
