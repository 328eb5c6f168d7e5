"""Which cluster a request goes to: filters, then a weighted score, then the ramp.

Signals, each in [0, 1] (1 = best), weighted by the profile (`WeightsSpec`):

    kvHeadroom  1 - saturation, the cluster's reported pool saturation
    queue       1 / (1 + queued requests per ready pod)
    proximity   1 in the client's home region, 0 elsewhere
    errors      1 - error rate (the worse of the reported one and this router's own
                EWMA of failed attempts, broken and stalled streams included)
    cost        cheapest / this, on USD per million generated tokens at capacity
                (hourlyCostUsd / (capacityTokensPerSecond × 3600) × 1e6: what the
                cluster costs per token when it serves what it can, never its current
                throughput, which makes a busy expensive cluster look cheap); on the
                hourly cost of the whole cluster while any candidate has no capacity set

Order of choice:
1. Routable clusters only (registry); clusters without a ready pod go last, and before
   them clusters whose error rate is `ERROR_RATE_BEHIND` or more (a cluster that fails
   most of what it takes, e.g. one that breaks every stream while reporting no load,
   must not win on its empty queue).
2. `cost` profile (asked for, or sheddable traffic): clusters that meet the latency budget
   (the request's `x-igw-latency-budget-ms`, else the config's; against the first-byte
   EWMA this router measured, unknown counts as meeting it) AND have
   headroom (saturation < `saturationMax`) come first; cost then dominates their score.
3. Score descending, then priority ascending, then name: a deterministic ranking.
4. Ramp-back: a cluster ramping with fraction f keeps its place when the request's one
   random draw is below f and is moved behind the others otherwise, so its share grows
   from 0 to its fair share over the window (one draw for all: two clusters returning
   together get f between them, not more) while it stays available as a fallback.

The whole ranking is returned: the server tries the next cluster when one fails before
streaming.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from inference_gateway.frontends.global_router.clusters import ClusterState
from inference_gateway.frontends.global_router.config import (
    GlobalRouterSpec,
    ProfileName,
    WeightsSpec,
)

__all__ = [
    "ERROR_RATE_BEHIND",
    "Choice",
    "RequestTraits",
    "cost_basis",
    "rank_clusters",
    "score",
]

ERROR_RATE_BEHIND = 0.5  # a cluster failing this share of attempts goes behind the rest


@dataclass(frozen=True, slots=True)
class RequestTraits:
    home_region: str | None
    profile: ProfileName
    sheddable: bool = False
    latency_budget_s: float | None = None  # None: the config's latencyBudgetMs


@dataclass(frozen=True, slots=True)
class Choice:
    ranked: list[ClusterState]
    profile: ProfileName


def _cost_key(state: ClusterState, at_capacity: bool) -> float:
    if at_capacity:
        cost = state.cost_per_million()
        return cost if cost is not None else float("inf")
    return state.spec.hourly_cost_usd


def score(
    state: ClusterState,
    traits: RequestTraits,
    weights: WeightsSpec,
    cheapest: float,
    at_capacity: bool,
) -> float:
    status = state.status
    if status is None:
        return 0.0
    ready = max(1, status.readyPods)
    signals = (
        (weights.kv_headroom, max(0.0, 1.0 - min(1.0, status.saturation))),
        (weights.queue, 1.0 / (1.0 + status.queued / ready)),
        (weights.proximity, 1.0 if state.spec.region == traits.home_region else 0.0),
        (weights.errors, 1.0 - state.error_rate),
    )
    total = sum(w * s for w, s in signals)
    if weights.cost > 0:
        cost = _cost_key(state, at_capacity)
        total += weights.cost * (1.0 if cost <= 0 else min(1.0, cheapest / cost))
    return total


def cost_basis(routable: list[ClusterState]) -> tuple[float, bool]:
    """The cheapest candidate's cost and whether every one has a capacity set (then costs
    are per million tokens at capacity, else hourly): what `score` compares against."""
    at_capacity = all(s.cost_per_million() is not None for s in routable)
    cheapest = min((_cost_key(s, at_capacity) for s in routable), default=0.0)
    return cheapest, at_capacity


def rank_clusters(
    spec: GlobalRouterSpec,
    routable: list[ClusterState],
    traits: RequestTraits,
    now: float,
    rng: Callable[[], float] = random.random,
) -> Choice:
    profile: ProfileName = "cost" if traits.sheddable else traits.profile
    weights = spec.weights(profile)
    cheapest, at_capacity = cost_basis(routable)
    budget_s = traits.latency_budget_s or spec.latency_budget_ms / 1000

    def tier(state: ClusterState) -> int:
        status = state.status
        if status is None or status.readyPods == 0:
            return 3
        if state.error_rate >= ERROR_RATE_BEHIND:
            return 2
        if profile != "cost":
            return 0
        fast = state.ttft_ewma_s is None or state.ttft_ewma_s <= budget_s
        return 0 if fast and status.saturation < spec.saturation_max else 1

    scored = sorted(
        routable,
        key=lambda s: (
            tier(s),
            -score(s, traits, weights, cheapest, at_capacity),
            s.spec.priority,
            s.name,
        ),
    )
    draw = rng()  # one draw per request: the returning clusters' share together is f
    kept = [s for s in scored if draw < s.ramp_fraction(now, spec.ramp_s)]
    held = [s for s in scored if s not in kept]
    return Choice(kept + held, profile)
