"""Several router replicas in front of one fleet: `POLICY@N` (e.g. `gateway@4`).

Production gateways run more than one replica for availability; a load balancer spreads
requests across them, and each replica keeps its own view of the fleet: its own scrape
results, its own count of what it sent since the last scrape, its own in-flight
bookkeeping, prefix index and TTFT model.

`POLICY@N` runs the replicas as shipped: they share their dispatch view through the
store (`scheduling.shared_view`, `shared_store.dispatch`): every `PUBLISH_INTERVAL_S` each
replica, in one store round trip, publishes its own pending requests and prefill tokens
per pod and the ages of its oldest admission waiters, and reads the others'. Modelled
honestly: replica i's loop ticks at its own phase; the exchange of a tick at time t
reaches the store at t + rtt/2 and its answer is used from t + rtt on; the store then
holds, for each other replica j, what j had at its own last tick at or before t. So a
peer's dispatch is seen between rtt and 2 x interval + rtt late, never at once.

`POLICY@N-unshared` keeps the old behaviour: none of the replicas sees what the others
just sent, so a burst can *herd* onto the pod that looked best at the last scrape. It
stays in the benchmark beside the shared figure, as what the store buys.

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
import math
import random
from collections import deque
from collections.abc import Callable

from inference_gateway.core.scheduling.shared_view import (
    PUBLISH_INTERVAL_S,
    STORE_RTT_S,
    DispatchCounts,
    apply_peer_dispatch,
    own_dispatch,
)
from inference_gateway.core.traffic.flow_control import BANDS, FlowController
from inference_gateway.errors import ConfigError
from inference_gateway.sim.disagg import Split
from inference_gateway.sim.pods import SimPod
from inference_gateway.sim.policies import DEFERRED, Policy
from inference_gateway.sim.workload import SimRequest

__all__ = ["Replicated", "Sharing", "parse_replicas"]

MAX_REPLICAS = 64
UNSHARED = "-unshared"


@dataclasses.dataclass(frozen=True, slots=True)
class Sharing:
    """How replicas exchange their dispatch view: one store round trip every `interval_s`."""

    interval_s: float = PUBLISH_INTERVAL_S
    rtt_s: float = STORE_RTT_S


def parse_replicas(name: str) -> tuple[str, int, Sharing | None] | None:
    """`gateway@4` → (`gateway`, 4, default sharing); `gateway@4-unshared` → (…, None);
    a name without `@` → None."""
    base, sep, count = name.rpartition("@")
    if not sep:
        return None
    shared = not count.endswith(UNSHARED)
    count = count.removesuffix(UNSHARED)
    if not count.isdigit() or not 1 <= int(count) <= MAX_REPLICAS or not base:
        raise ConfigError(
            "policies",
            [
                f"policies: {name!r}: expected POLICY@N or POLICY@N{UNSHARED} "
                f"with 1 <= N <= {MAX_REPLICAS}"
            ],
        )
    return base, int(count), Sharing() if shared else None


class _Exchange:
    """The store as the replicas see it, on the simulator's clock (see module docstring).

    Each replica's own counts and queue heads are logged when they change; a replica's
    view of the others is rebuilt only when its next exchange completes."""

    def __init__(self, views: list[list[SimPod]], replicas: list[Policy], sharing: Sharing) -> None:
        self.sharing = sharing
        self.endpoints = [[p.endpoint for p in view] for view in views]
        # admission queues, where the base policy has them (`gateway`)
        self.controllers: list[FlowController | None] = [
            getattr(r, "controller", None) for r in replicas
        ]
        n = len(views)
        self.phase = [sharing.interval_s * i / n for i in range(n)]
        # per replica: (time, its counts, its oldest waiters per band) from then on
        empty: _Entry = (-math.inf, {}, {})
        self.log: list[deque[_Entry]] = [deque([empty]) for _ in views]
        self.seen = [-math.inf] * n  # tick whose answer each replica applied last
        # a log entry older than this can no longer be the answer to any exchange
        self.horizon = 2 * sharing.interval_s + sharing.rtt_s

    def _tick_at_or_before(self, i: int, t: float) -> float:
        interval, phase = self.sharing.interval_s, self.phase[i]
        return phase + math.floor((t - phase) / interval) * interval

    def record(self, i: int, now: float) -> None:
        """Replica i's own state may have changed at `now`: log it if it did."""
        counts = own_dispatch(self.endpoints[i])
        controller = self.controllers[i]
        heads = {} if controller is None else _oldest_waiters(controller)
        log = self.log[i]
        if counts == log[-1][1] and heads == log[-1][2]:
            return
        log.append((now, counts, heads))
        while len(log) > 1 and log[1][0] <= now - self.horizon:
            log.popleft()

    def _published(self, j: int, t: float) -> tuple[DispatchCounts, dict[str, list[float]]]:
        """What replica j published at its last tick at or before `t`: its counts and
        its oldest waiters' ages, as the store holds them."""
        tick = self._tick_at_or_before(j, t)
        entry = self.log[j][0]
        for logged in self.log[j]:
            if logged[0] > tick:
                break
            entry = logged
        return entry[1], {band: [tick - at for at in times] for band, times in entry[2].items()}

    def refresh(self, i: int, now: float) -> None:
        """Apply the answer of replica i's last completed exchange to its view."""
        tick = self._tick_at_or_before(i, now - self.sharing.rtt_s)
        if tick == self.seen[i]:
            return
        self.seen[i] = tick
        published = [self._published(j, tick) for j in range(len(self.log)) if j != i]
        apply_peer_dispatch(self.endpoints[i], (counts for counts, _ in published))
        controller = self.controllers[i]
        if controller is not None:
            controller.set_peer_waiters((ages for _, ages in published), at=tick)


_Entry = tuple[float, DispatchCounts, dict[str, tuple[float, ...]]]


def _oldest_waiters(controller: FlowController) -> dict[str, tuple[float, ...]]:
    """Band → enqueue times of the oldest waiters (the simulator's clock is shared, so
    the log keeps times and `_published` turns them into the ages a replica sends)."""
    return {
        band: tuple(controller.oldest_waiters(band)) for band in BANDS if controller.queued(band)
    }


class Replicated:
    """N instances of one policy, each over its own view of the pods, sharing their
    dispatch counts through a modelled store unless `sharing` is None."""

    def __init__(
        self,
        name: str,
        pods: list[SimPod],
        seed: int,
        *,
        base: str,
        count: int,
        make: Callable[[str, list[SimPod], int], Policy],
        sharing: Sharing | None = None,
    ) -> None:
        self.name = name
        self.pods = pods
        self.random = random.Random(seed ^ 0x5EED)
        self.views: list[list[SimPod]] = []
        self.replicas: list[Policy] = []
        for i in range(count):
            view = [dataclasses.replace(p, endpoint=dataclasses.replace(p.endpoint)) for p in pods]
            self.views.append(view)
            self.replicas.append(make(base, view, seed + 7919 * i))
        self.needs_scrapes = any(r.needs_scrapes for r in self.replicas)
        self._drains = [(i, r.drain) for i, r in enumerate(self.replicas) if hasattr(r, "drain")]
        self._owner: dict[int, int] = {}
        self.exchange = (
            _Exchange(self.views, self.replicas, sharing) if sharing is not None else None
        )

    def _sync(self, view: list[SimPod]) -> None:
        for mine, shared in zip(view, self.pods, strict=True):
            ep, src = mine.endpoint, shared.endpoint
            if ep.scraped_at != src.scraped_at and src.metrics is not None:
                ep.record_scrape(src.metrics, src.scraped_at)

    def _prepare(self, i: int, now: float) -> None:
        """Replica i's view as of `now`: the latest scrape, and the others' counts."""
        exchange = self.exchange
        if exchange is None:
            if self.needs_scrapes:
                self._sync(self.views[i])
            return
        for j, view in enumerate(self.views):  # a scrape resets every replica's counts
            self._sync(view)
            exchange.record(j, now)
        exchange.refresh(i, now)

    def _changed(self, i: int, now: float) -> None:
        if self.exchange is not None:
            self.exchange.record(i, now)

    def route(self, request: SimRequest, now: float) -> SimPod | Split | None:
        i = self.random.randrange(len(self.replicas))
        self._prepare(i, now)
        pod = self.replicas[i].route(request, now)
        if pod is None:
            return None
        self._owner[request.request_id] = i
        self._changed(i, now)
        return pod if pod is DEFERRED else self._shared(pod)

    def _shared(self, pod: SimPod | Split) -> SimPod | Split:
        """A replica's pick on the shared pods (a P/D pick's two)."""
        if isinstance(pod, Split):
            return Split(self.pods[pod.decode.index], self.pods[pod.prefill.index])
        return self.pods[pod.index]

    def drain(self, now: float) -> list[tuple[SimRequest, SimPod | Split | None]]:
        """Requests leaving any replica's admission queue now (see `admission`)."""
        out: list[tuple[SimRequest, SimPod | Split | None]] = []
        for i, drain in self._drains:
            self._prepare(i, now)
            for request, pod in drain(now):
                if pod is None:
                    self._owner.pop(request.request_id, None)
                out.append((request, None if pod is None else self._shared(pod)))
            self._changed(i, now)
        return out

    def on_prefill_finished(
        self, request: SimRequest, pod: SimPod, ttft: float | None, now: float
    ) -> None:
        i = self._owner.get(request.request_id)
        ended = getattr(self.replicas[i], "on_prefill_finished", None) if i is not None else None
        if i is not None and ended is not None:
            ended(request, self.views[i][pod.index], ttft, now)
            self._changed(i, now)

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        i = self._owner.get(request.request_id)
        if i is not None:
            self.replicas[i].on_first_token(request, self.views[i][pod.index], ttft, now)
            self._changed(i, now)

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        i = self._owner.pop(request.request_id, None)
        if i is not None:
            self.replicas[i].on_finished(request, self.views[i][pod.index], now)
            self._changed(i, now)
