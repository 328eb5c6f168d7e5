"""Priority bands and admission control: who goes first when a pool is full.

A pool is *saturated* for a band when every ready pod is full for it. A pod is full at

    max(queue / queue_threshold, kv / kv_threshold, prefill_s / prefill_threshold_s) >= 1

where `queue` is the scraped waiting count plus what the picker sent since the scrape
(upstream's detector, `max(queue/5, kv/0.8)`, with the burst between scrapes seen), and
`prefill_s` is the pending prefill: prompt tokens dispatched to the pod without a first
token yet, times its measured seconds per token (`Endpoint.prefill_tokens`,
`prefill_s_per_token`). Both counts include the other gateway replicas' dispatches when
they share a dispatch view (`Endpoint.peer_requests`, `peer_prefill_tokens`). vLLM moves
waiting requests into its chunked-prefill batch (*running*) as soon as the token budget
allows, so with long prompts the queue looks empty while a new request would wait for
several prefills; the prefill term sees them.

While a pool is not saturated every request goes straight through. While it is:

* `sheddable` requests are rejected at once (429);
* standard and sheddable requests count a pod as full earlier than critical ones do
  (`noncritical_*` thresholds), which leaves headroom only critical requests use;
* `critical` and `standard` requests wait in bounded per-band queues; a full queue
  answers 429, a request whose wait passes the band's TTL answers 503;
* as capacity frees, waiters are released in strict band order (critical before
  standard), and within a band round-robin across fairness ids, so one tenant's burst
  cannot starve another's.

With several gateway replicas sharing a dispatch view, each replica also learns when
the others' oldest waiters of every band were enqueued (`peer_waiters`, a few
milliseconds late, published together with their dispatch counts), and the queues
behave like one: a new request queues behind the others' waiters of its band or a
better one, and in each release round the others' older waiters (and all of a better
band) are given their free slots first, so a replica releases its own waiter only with
a slot to spare. Both come from one snapshot of the other replica, so a waiter it has
released since shows either as waiting or as dispatched, never as neither. Without
this, N replicas each release into the same free slots in their own order, and a
request waits behind newer ones that reached a luckier replica (in
`mixed-fleet-bursty`, 4 replicas' P99 TTFT stayed about 1.3x one replica's with only
dispatch counts shared, even at once).

This module is a pure state machine over explicit times: the HTTP proxy drives it with
asyncio futures, the simulator with its virtual clock, and tests call it directly.
`Retry-After` is computed from the pool's measured drain rate and the work ahead,
clamped to the configured range.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference_gateway.config.spec import FlowControlSpec, SaturationSpec
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic import retry_after

__all__ = [
    "BANDS",
    "Admission",
    "FlowController",
    "Limits",
    "SlotCounter",
    "Waiter",
    "free_slots",
    "pod_load",
    "pod_saturated",
]

BANDS = ("critical", "standard", "sheddable")
# waiters per band a replica tells the others about (the oldest); a longer queue's tail
# is released by its own replica once these have gone
SHARED_WAITERS = 64


@dataclass(frozen=True, slots=True)
class Limits:
    """What fills a pod for one band; `prefill_s` None leaves the prefill term out."""

    queue: float
    kv: float
    prefill_s: float | None = None

    @classmethod
    def for_band(cls, spec: SaturationSpec, band: str, reserve: bool = True) -> Limits:
        """`reserve`: hold non-critical bands to the stricter thresholds (see
        `FlowController.reserving`)."""
        if band == "critical" or not reserve:
            return cls(spec.queue_threshold, spec.kv_threshold, spec.prefill_threshold_s)
        return cls(
            spec.noncritical_queue_threshold,
            spec.noncritical_kv_threshold,
            spec.noncritical_prefill_threshold_s,
        )


def pending_prefill_s(endpoint: Endpoint) -> float:
    """Seconds of prefill dispatched to the pod and not started: what a new request waits."""
    return (endpoint.prefill_tokens + endpoint.peer_prefill_tokens) * endpoint.prefill_s_per_token


def pod_load(endpoint: Endpoint, limits: Limits) -> float:
    """`max(queue/q, kv/kv_t, prefill_s/prefill_t)`: 1 or more is full."""
    m = endpoint.metrics
    if m is None:
        return math.inf
    queue = m.waiting + endpoint.sent_requests + endpoint.peer_requests
    load = max(queue / limits.queue, m.kv_usage / limits.kv)
    if limits.prefill_s is not None:
        load = max(load, pending_prefill_s(endpoint) / limits.prefill_s)
    return load


def pod_saturated(endpoint: Endpoint, limits: Limits) -> bool:
    return pod_load(endpoint, limits) >= 1


def _room(e: Endpoint, limits: Limits) -> int:
    """Requests a pod can take before it is full again: the queue headroom, or one under
    a prefill threshold (a request's size, and so its prefill time, is unknown until it
    is picked); 0 for a stale, unscraped or full pod."""
    m = e.metrics
    if e.stale or m is None or pod_saturated(e, limits):
        return 0
    if limits.prefill_s is not None:
        return 1
    return max(1, math.ceil(limits.queue - (m.waiting + e.sent_requests + e.peer_requests)))


def free_slots(endpoints: Iterable[Endpoint], limits: Limits) -> int:
    """Requests the ready pods can take before each is full again."""
    return sum(_room(e, limits) for e in endpoints)


def has_free_slot(endpoints: Iterable[Endpoint], limits: Limits, taken: int = 0) -> bool:
    """`free_slots(...) > taken`, stopping at the first pod that settles it (the
    admission check of every request, where usually the first pod does)."""
    for e in endpoints:
        taken -= _room(e, limits)
        if taken < 0:
            return True
    return False


class SlotCounter:
    """Free slots per band for one admission round: critical requests may fill pods up to
    the upstream thresholds, the other bands only up to the stricter non-critical ones;
    every release uses a slot of both kinds. `in_transit` requests were released and have
    not reached a pod yet: they hold slots too. `reserve` False: no headroom is kept for
    critical requests (none arrived lately). `limits(band, reserve)`: `Limits.for_band`
    of `spec.saturation`, or what the controller made of it already."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        spec: FlowControlSpec,
        in_transit: int = 0,
        *,
        reserve: bool = True,
        limits: Callable[[str, bool], Limits] | None = None,
    ) -> None:
        if limits is None:
            s = spec.saturation
            normal = Limits.for_band(s, "standard", reserve)
            critical = Limits.for_band(s, "critical")
        else:
            normal, critical = limits("standard", reserve), limits("critical", True)
        self.normal = self.critical = -in_transit
        for e in endpoints:  # one pass for both bands (every admission round counts)
            self.normal += _room(e, normal)
            self.critical += _room(e, critical)

    def full(self, band: str) -> bool:
        return (self.critical if band == "critical" else self.normal) <= 0

    def take(self, band: str) -> bool:
        if self.full(band):
            return False
        self.normal -= 1
        self.critical -= 1
        return True


@dataclass(slots=True, eq=False)
class Waiter:
    """A queued request. `handle` is the driver's (an asyncio future, a sim record)."""

    band: str
    fairness_id: str
    enqueued_at: float
    handle: Any = None
    done: bool = False


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to `offer`: admit now, wait (`waiter`), or reject with a status."""

    admitted: bool
    waiter: Waiter | None = None
    status: int = 0  # 429 or 503 when rejected
    reason: str = ""
    retry_after_s: int = 0


@dataclass(slots=True)
class _Band:
    max_queue: int
    ttl_s: float
    # fairness id → FIFO of waiters; OrderedDict order is the round-robin order
    flows: OrderedDict[str, deque[Waiter]] = field(default_factory=OrderedDict)
    size: int = 0


class FlowController:
    """Admission for one pool."""

    def __init__(self, spec: FlowControlSpec, *, drain_halflife_s: float = 10.0) -> None:
        self.spec = spec
        self.bands = {
            name: _Band(
                spec.bands[name].max_queue if name in spec.bands else 0,
                spec.bands[name].ttl_s if name in spec.bands else 1.0,
            )
            for name in BANDS
        }
        self.halflife = drain_halflife_s
        self._count = 0.0  # completions, exponentially decayed
        self._rate_at: float | None = None
        self._first: float | None = None
        self._critical_at = -math.inf  # when the last critical request was offered
        self.rejected: dict[str, int] = {}
        # band → when the other replicas' oldest waiters of that band were enqueued,
        # oldest first, on this controller's clock (`set_peer_waiters`); empty with one
        self.peer_waiters: dict[str, list[float]] = {}
        self._limits_of: SaturationSpec | None = None  # the spec `_limits` was made from
        self._limits: dict[bool, Limits] = {}

    # ------------------------------------------------------------------ saturation

    def limits(self, band: str, reserve: bool = True) -> Limits:
        """`Limits.for_band` of the current spec, made once per spec rather than per
        call: every admission round needs two and every offer one (~2% of igw serve's
        CPU per request when made afresh). A reload assigns a new spec, so a new set."""
        saturation = self.spec.saturation
        if saturation is not self._limits_of:
            self._limits_of, self._limits = saturation, {}
        strict = band == "critical" or not reserve  # the two kinds `for_band` makes
        limits = self._limits.get(strict)
        if limits is None:
            limits = self._limits[strict] = Limits.for_band(saturation, band, reserve)
        return limits

    def reserving(self, now: float) -> bool:
        """Whether non-critical bands are held to the stricter thresholds now: within
        `critical_reserve_s` of the last critical request (always when it is None)."""
        window = self.spec.saturation.critical_reserve_s
        return window is None or now - self._critical_at <= window

    def slots(self, endpoints: list[Endpoint], now: float, in_transit: int = 0) -> SlotCounter:
        """Free slots per band for one admission round at `now`."""
        return SlotCounter(
            endpoints, self.spec, in_transit, reserve=self.reserving(now), limits=self.limits
        )

    def full(self, band: str, endpoints: list[Endpoint], now: float, in_transit: int = 0) -> bool:
        """`slots(endpoints, now, in_transit).full(band)`, without counting every pod."""
        limits = self.limits(band, self.reserving(now))
        return not has_free_slot(endpoints, limits, in_transit)

    def saturated(
        self, endpoints: Iterable[Endpoint], band: str = "critical", now: float | None = None
    ) -> bool:
        """Every ready pod is full for `band` (at `now`'s reserve; None: reserving)."""
        reserve = True if now is None else self.reserving(now)
        limits = self.limits(band, reserve)
        return all(pod_saturated(e, limits) for e in endpoints if not e.stale)

    def saturation(self, endpoints: Iterable[Endpoint]) -> float:
        """Mean per-pod load at the critical (upstream) thresholds: the autoscaling signal
        (1 or more is full)."""
        limits = self.limits("critical")
        values = [pod_load(e, limits) for e in endpoints if not e.stale and e.metrics is not None]
        return sum(values) / len(values) if values else 1.0

    # ------------------------------------------------------------------ queueing

    def queued(self, band: str | None = None) -> int:
        if band is not None:
            return self.bands[band].size
        return sum(b.size for b in self.bands.values())

    def offer(
        self, band: str, fairness_id: str, now: float, saturated: bool, handle: Any = None
    ) -> Admission:
        """Admit, queue or reject a new request. `saturated`: the pool is full for this
        band. A request goes straight through when it is not and nobody of its band or a
        better one waits (lower bands wait because the pool is full for them)."""
        if band not in self.bands:
            band = "standard"
        if band == "critical":
            self._critical_at = now
        ahead = BANDS[: BANDS.index(band) + 1]
        if not saturated and not any(self.bands[b].size or b in self.peer_waiters for b in ahead):
            return Admission(True)
        queue = self.bands[band]
        if band == "sheddable" or queue.size >= queue.max_queue:
            reason = "sheddable" if band == "sheddable" else "queue_full"
            return self._reject(429, reason)
        waiter = Waiter(band, fairness_id, now, handle)
        queue.flows.setdefault(fairness_id, deque()).append(waiter)
        queue.size += 1
        return Admission(False, waiter=waiter)

    def release(self, now: float, capacity: Callable[[str], bool]) -> list[Waiter]:
        """Waiters to dispatch now, best band first, while `capacity(band)` says yes.

        `capacity` is re-evaluated after each release, so the caller's accounting of
        what it just dispatched is seen. The other replicas' older waiters of a band, and
        all of a better band, take their slots from `capacity` first (see
        `peer_waiters`): their own replica releases them.
        """
        out: list[Waiter] = []
        for name in BANDS:
            self._release_band(name, capacity, out)
        return out

    def _release_band(self, name: str, capacity: Callable[[str], bool], out: list[Waiter]) -> None:
        queue = self.bands[name]
        theirs = self.peer_waiters.get(name, ())
        owed = 0  # the others' waiters of this band given a slot so far
        while queue.size:
            if theirs:
                mine = self.oldest(name)
                while owed < len(theirs) and theirs[owed] < mine:
                    if not capacity(name):
                        return
                    owed += 1
            if not capacity(name):
                return
            waiter = self._pop_fair(queue)
            if waiter is None:
                break
            waiter.done = True
            out.append(waiter)
        for _ in range(owed, len(theirs)):  # they go before any worse band
            if not capacity(name):
                return

    def oldest(self, band: str) -> float:
        """When the oldest live waiter of `band` here was enqueued (inf: none)."""
        heads = (
            next((w.enqueued_at for w in flow if not w.done), math.inf)
            for flow in self.bands[band].flows.values()
        )
        return min(heads, default=math.inf)

    def oldest_waiters(self, band: str, limit: int = SHARED_WAITERS) -> list[float]:
        """Enqueue times of the `limit` oldest live waiters of `band`, oldest first."""
        flows = (
            (w.enqueued_at for w in flow if not w.done) for flow in self.bands[band].flows.values()
        )
        return list(itertools.islice(heapq.merge(*flows), limit))  # each flow is FIFO

    def waiter_ages(self, now: float) -> dict[str, list[float]]:
        """What this replica shares: per band with waiters, the ages (s) of its oldest
        ones, oldest first."""
        return {
            band: [now - t for t in self.oldest_waiters(band)]
            for band in BANDS
            if self.bands[band].size
        }

    def set_peer_waiters(self, peers: Iterable[Mapping[str, Sequence[float]]], at: float) -> None:
        """The other replicas' `waiter_ages`, measured at (about) `at` on this clock."""
        merged: dict[str, list[float]] = {}
        for ages in peers:
            for band, band_ages in ages.items():
                if band in self.bands and band_ages:
                    merged.setdefault(band, []).extend(at - age for age in band_ages)
        self.peer_waiters = {band: sorted(times) for band, times in merged.items()}

    def expire(self, now: float) -> list[Waiter]:
        """Waiters whose band TTL has passed (answer them 503)."""
        out = []
        for queue in self.bands.values():
            for flow in queue.flows.values():
                while flow and now - flow[0].enqueued_at >= queue.ttl_s:
                    waiter = flow.popleft()
                    queue.size -= 1
                    if not waiter.done:
                        waiter.done = True
                        out.append(waiter)
            self._drop_empty(queue)
        for _ in out:
            self.rejected["ttl_expired"] = self.rejected.get("ttl_expired", 0) + 1
        return out

    def cancel(self, waiter: Waiter) -> None:
        """The client went away: leave the queue at once."""
        if waiter.done:
            return
        waiter.done = True
        queue = self.bands[waiter.band]
        flow = queue.flows.get(waiter.fairness_id)
        if flow is not None and waiter in flow:
            flow.remove(waiter)
            queue.size -= 1
            self._drop_empty(queue)

    @staticmethod
    def _pop_fair(queue: _Band) -> Waiter | None:
        while queue.flows:
            fairness_id, flow = next(iter(queue.flows.items()))
            waiter = flow.popleft()
            queue.size -= 1
            if flow:
                queue.flows.move_to_end(fairness_id)  # next flow's turn
            else:
                del queue.flows[fairness_id]
            if not waiter.done:
                return waiter
        return None

    @staticmethod
    def _drop_empty(queue: _Band) -> None:
        for key in [k for k, flow in queue.flows.items() if not flow]:
            del queue.flows[key]

    # ------------------------------------------------------------------ Retry-After

    def on_completion(self, now: float) -> None:
        """Feed the drain-rate estimate: completions counted with exponential decay."""
        if self._first is None:
            self._first = self._rate_at = now
        assert self._rate_at is not None
        self._count = self._count * 0.5 ** ((now - self._rate_at) / self.halflife) + 1
        self._rate_at = now

    def drain_rate(self, now: float) -> float:
        """Completions per second over a decaying window (corrected for a short history)."""
        if self._first is None or self._rate_at is None:
            return 0.0
        count = self._count * 0.5 ** ((now - self._rate_at) / self.halflife)
        window = self.halflife / math.log(2) * (1 - 0.5 ** ((now - self._first) / self.halflife))
        return count / window if window > 0 else 0.0

    def retry_after(self, now: float, pool_waiting: int = 0) -> int:
        """Seconds until the work ahead of a new request should have drained:
        `(queued here + waiting at the pods + 1) / drain rate`, clamped to the configured
        range (retry_after.py rounds it)."""
        lo, hi = self.spec.retry_after_min_s, self.spec.retry_after_max_s
        rate = self.drain_rate(now)
        if rate <= 0:
            return hi
        ahead = self.queued() + pool_waiting + 1
        return retry_after.seconds(ahead / rate, low=lo, high=hi)

    def _reject(self, status: int, reason: str) -> Admission:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        return Admission(False, status=status, reason=reason)
