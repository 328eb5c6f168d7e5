"""Tier 2: which cluster a request goes to: filters, then a weighted score, then the ramp.

The rule beside the tier-1 scheduler (which pod of a cluster), so both of its drivers
run this one: `igw global` (`frontends/global_router/server.py`) and the simulator's
fleet tier (`sim/fleet/tier.py`). It reads a cluster through `Candidate` and the router's
config through `Rules`, which the registry's `ClusterState` (`cluster_registry.py`) and
`GlobalRouterSpec` (`config/global_router.py`) are, so the rule needs neither the
registry nor the config file to be tested.

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

Load the status cannot show yet: a status is up to `pollIntervalMs` old, and the
requests this router sent since (`Candidate.sent_requests`: sent since the cluster's last
status, no first byte yet; the registry counts them) are in neither its saturation nor
its queue. Each counts as one more request waiting at one of its ready pods: `queued`
plus one, and saturation plus 1 / (ready pods × `POD_QUEUE`), the queue depth that fills
a pod at a cluster gateway's default (`SaturationSpec.queue_threshold`, upstream's 5).
So a burst between two polls (a lost cluster's streams resumed together, or new
requests) spreads over the clusters by their ready pods and headroom as the statuses
would have shown it, where each request would otherwise take the cluster that looked
best at the poll; the picker's `Endpoint.sent_requests` does the same for pods between
scrapes. Both signals, the full clusters' place (1. below) and the `cost` profile's
headroom test (2.) read this load (`load`).

Order of choice:
1. Routable clusters only (registry), less those in `exclude` (a broken stream's
   continuation is ranked at the break over the clusters as they are then, less those
   its request tried: both drivers' `_continue` / `_resume`, as tier 1's
   `Director.rerank`); clusters without a ready pod go last, and before
   them clusters whose error rate is `ERROR_RATE_BEHIND` or more (a cluster that fails
   most of what it takes, e.g. one that breaks every stream while reporting no load,
   must not win on its empty queue), and before those the full ones (saturation, with
   what was sent since the status, 1 or more: the cluster gateway would queue the
   request), least saturated first: a request waits out a full cluster's queue, which
   no weight of proximity (a round trip) or cost outweighs, and a burst larger than
   every cluster's headroom spreads over them by their ready pods.
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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from inference_gateway.config.global_router import ProfileName
from inference_gateway.config.spec import SaturationSpec
from inference_gateway.core.scheduling.types import PodMetrics

__all__ = [
    "ERROR_RATE_BEHIND",
    "Candidate",
    "Choice",
    "ProfileName",
    "RequestTraits",
    "Rules",
    "cost_basis",
    "load",
    "mean_kv_usage",
    "rank_clusters",
    "score",
]

ERROR_RATE_BEHIND = 0.5  # a cluster failing this share of attempts goes behind the rest
POD_QUEUE = SaturationSpec().queue_threshold  # waiting requests that fill a pod (default)


class Weights(Protocol):
    """One profile's signal weights (`WeightsSpec`)."""

    @property
    def kv_headroom(self) -> float: ...
    @property
    def queue(self) -> float: ...
    @property
    def proximity(self) -> float: ...
    @property
    def errors(self) -> float: ...
    @property
    def cost(self) -> float: ...


class Rules(Protocol):
    """What the choice reads of the router's config (`GlobalRouterSpec`)."""

    @property
    def ramp_s(self) -> float: ...
    @property
    def latency_budget_ms(self) -> float: ...
    @property
    def saturation_max(self) -> float: ...
    def weights(self, profile: ProfileName) -> Weights: ...


class Placement(Protocol):
    """A cluster's configured place and price (`ClusterSpec`)."""

    @property
    def region(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def hourly_cost_usd(self) -> float: ...


class Load(Protocol):
    """A cluster's last reported status (`ClusterStatus`)."""

    @property
    def readyPods(self) -> int: ...
    @property
    def saturation(self) -> float: ...
    @property
    def queued(self) -> float: ...


class Candidate(Protocol):
    """A routable cluster as the router knows it (`ClusterState`)."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> Placement: ...
    @property
    def status(self) -> Load | None: ...
    @property
    def error_rate(self) -> float: ...
    @property
    def ttft_ewma_s(self) -> float | None: ...
    @property
    def sent_requests(self) -> int: ...
    def ramp_fraction(self, now: float, ramp_s: float) -> float: ...
    def cost_per_million(self) -> float | None: ...


C = TypeVar("C", bound=Candidate)


def mean_kv_usage(ready: Sequence[PodMetrics]) -> float:
    """What a cluster reports as its `kvUsage`: the mean KV-cache use of its ready pods;
    0.0 with none, as the pool's own gauge (`inference_pool_average_kv_cache_utilization`)
    says, so the cluster-wide figure and the per-pool ones never disagree (`readyPods` 0
    already says nothing can be served). A cluster gateway's status
    (`frontends/status.py`) and the fleet simulator's both report it."""
    return sum(m.kv_usage for m in ready) / len(ready) if ready else 0.0


@dataclass(frozen=True, slots=True)
class RequestTraits:
    home_region: str | None
    profile: ProfileName
    sheddable: bool = False
    latency_budget_s: float | None = None  # None: the config's latencyBudgetMs


@dataclass(frozen=True, slots=True)
class Choice(Generic[C]):
    ranked: list[C]
    profile: ProfileName


def load(state: Candidate, status: Load) -> tuple[float, float]:
    """(saturation, queued) of `state` as the choice weighs them: its `status` plus the
    requests this router sent since it (module docstring)."""
    sent = state.sent_requests
    ready = max(1, status.readyPods)
    return status.saturation + sent / (ready * POD_QUEUE), status.queued + sent


def _cost_key(state: Candidate, at_capacity: bool) -> float:
    if at_capacity:
        cost = state.cost_per_million()
        return cost if cost is not None else float("inf")
    return state.spec.hourly_cost_usd


def score(
    state: Candidate,
    traits: RequestTraits,
    weights: Weights,
    cheapest: float,
    at_capacity: bool,
) -> float:
    status = state.status
    if status is None:
        return 0.0
    ready = max(1, status.readyPods)
    saturation, queued = load(state, status)
    signals = (
        (weights.kv_headroom, max(0.0, 1.0 - min(1.0, saturation))),
        (weights.queue, 1.0 / (1.0 + queued / ready)),
        (weights.proximity, 1.0 if state.spec.region == traits.home_region else 0.0),
        (weights.errors, 1.0 - state.error_rate),
    )
    total = sum(w * s for w, s in signals)
    if weights.cost > 0:
        cost = _cost_key(state, at_capacity)
        total += weights.cost * (1.0 if cost <= 0 else min(1.0, cheapest / cost))
    return total


def cost_basis(routable: list[C]) -> tuple[float, bool]:
    """The cheapest candidate's cost and whether every one has a capacity set (then costs
    are per million tokens at capacity, else hourly): what `score` compares against."""
    at_capacity = all(s.cost_per_million() is not None for s in routable)
    cheapest = min((_cost_key(s, at_capacity) for s in routable), default=0.0)
    return cheapest, at_capacity


def rank_clusters(
    spec: Rules,
    routable: list[C],
    traits: RequestTraits,
    now: float,
    rng: Callable[[], float] = random.random,
    exclude: Collection[str] = (),
) -> Choice[C]:
    """The clusters of `routable` not named in `exclude`, best first (module docstring)."""
    routable = [s for s in routable if s.name not in exclude]
    profile: ProfileName = "cost" if traits.sheddable else traits.profile
    weights = spec.weights(profile)
    cheapest, at_capacity = cost_basis(routable)
    budget_s = traits.latency_budget_s or spec.latency_budget_ms / 1000

    def tier(state: Candidate) -> tuple[int, float]:
        """(group, then within it) of "Order of choice" 1 and 2."""
        status = state.status
        if status is None or status.readyPods == 0:
            return 4, 0.0
        if state.error_rate >= ERROR_RATE_BEHIND:
            return 3, 0.0
        saturation = load(state, status)[0]
        if saturation >= 1:
            return 2, saturation
        if profile != "cost":
            return 0, 0.0
        fast = state.ttft_ewma_s is None or state.ttft_ewma_s <= budget_s
        return (0 if fast and saturation < spec.saturation_max else 1), 0.0

    scored = sorted(
        routable,
        key=lambda s: (
            *tier(s),
            -score(s, traits, weights, cheapest, at_capacity),
            s.spec.priority,
            s.name,
        ),
    )
    draw = rng()  # one draw per request: the returning clusters' share together is f
    kept = [s for s in scored if draw < s.ramp_fraction(now, spec.ramp_s)]
    held = [s for s in scored if s not in kept]
    return Choice(kept + held, profile)
