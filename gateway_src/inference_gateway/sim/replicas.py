"""Several router replicas in front of one fleet: `POLICY@N` (e.g. `gateway@4`).

Production gateways run more than one replica for availability; a load balancer spreads
requests across them, and each replica keeps its own view of the fleet: its own scrape
results, its own count of what it sent since the last scrape, its own in-flight
bookkeeping, prefix index and TTFT model. None of them sees what the others just sent,
so a burst can *herd*: every replica picks the same pod that looked best at the last
scrape. This module measures that.

Each replica is a full instance of the base policy built over *views* of the pods: the
same engine, a private `Endpoint`. Before each decision the replica's endpoints take any
newer scrape from the shared one (metrics and time) and reset their own "sent since last
scrape" counters, exactly as a real replica's store does when its scrape returns. All
replicas see each scrape at the same instant, which is the worst case for herding (real
replicas' scrapes are out of phase). Requests go to a replica chosen uniformly at random
(seeded), as an L4 load balancer spreads connections. A replica with admission control
queues in its own flow controller; the driver's `drain` reaches every replica's queue.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from ..errors import ConfigError
from .admission import DEFERRED
from .fleet import SimPod
from .workload import SimRequest

__all__ = ["Replicated", "parse_replicas"]

MAX_REPLICAS = 64


def parse_replicas(name: str) -> tuple[str, int] | None:
    """`gateway@4` → (`gateway`, 4); a name without `@` → None."""
    base, sep, count = name.rpartition("@")
    if not sep:
        return None
    if not count.isdigit() or not 1 <= int(count) <= MAX_REPLICAS or not base:
        raise ConfigError(
            "policies",
            [f"policies: {name!r}: expected POLICY@N with 1 <= N <= {MAX_REPLICAS}"],
        )
    return base, int(count)


class Replicated:
    """N independent instances of one policy, each over its own view of the pods."""

    def __init__(
        self,
        name: str,
        pods: list[SimPod],
        seed: int,
        *,
        base: str,
        count: int,
        make: Callable[[str, list[SimPod], int], object],
    ) -> None:
        self.name = name
        self.pods = pods
        self.random = random.Random(seed ^ 0x5EED)
        self.views: list[list[SimPod]] = []
        self.replicas: list = []
        for i in range(count):
            view = [dataclasses.replace(p, endpoint=dataclasses.replace(p.endpoint)) for p in pods]
            self.views.append(view)
            self.replicas.append(make(base, view, seed + 7919 * i))
        self.needs_scrapes = any(r.needs_scrapes for r in self.replicas)
        self._drains = [(i, r.drain) for i, r in enumerate(self.replicas) if hasattr(r, "drain")]
        self._owner: dict[int, int] = {}

    def _sync(self, view: list[SimPod]) -> None:
        for mine, shared in zip(view, self.pods, strict=True):
            ep, src = mine.endpoint, shared.endpoint
            if ep.scraped_at != src.scraped_at:
                ep.metrics = src.metrics
                ep.scraped_at = src.scraped_at
                ep.stale = src.stale
                ep.sent_requests = 0
                ep.sent_tokens = 0

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        i = self.random.randrange(len(self.replicas))
        view = self.views[i]
        if self.needs_scrapes:
            self._sync(view)
        pod = self.replicas[i].route(request, now)
        if pod is None:
            return None
        self._owner[request.request_id] = i
        return pod if pod is DEFERRED else self.pods[pod.index]

    def drain(self, now: float) -> list[tuple[SimRequest, SimPod | None]]:
        """Requests leaving any replica's admission queue now (see `admission`)."""
        out: list[tuple[SimRequest, SimPod | None]] = []
        for i, drain in self._drains:
            self._sync(self.views[i])
            for request, pod in drain(now):
                if pod is None:
                    self._owner.pop(request.request_id, None)
                out.append((request, None if pod is None else self.pods[pod.index]))
        return out

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        i = self._owner.get(request.request_id)
        if i is not None:
            self.replicas[i].on_first_token(request, self.views[i][pod.index], ttft, now)

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        i = self._owner.pop(request.request_id, None)
        if i is not None:
            self.replicas[i].on_finished(request, self.views[i][pod.index], now)
