"""The cluster registry: each cluster's last heartbeat, its health, and its ramp-back.

The tier-2 state beside its choice (`cluster_choice.py`): both of its drivers feed it,
`igw global` from its status poller (`frontends/global_router/clusters.py`) and the
simulator's fleet tier (`sim/fleet/tier.py`) on the virtual clock, so the drain, failover
and ramp-back rules measured in a simulation are the ones that run in production.

A cluster is routable from its first good `GET /status`. It is drained AT ONCE when
(a) a status poll fails (`connect_failed`), times out (`status_timeout`) or answers
something that is not a valid status (`status_invalid`), (b) no good status arrived
for `staleAfterMs` (`status_stale`), or (c) a request could not connect to it
(`connect_failed`, learnt passively), or (d) a stream it had started went silent for
`streamIdleTimeoutMs` (`stream_stalled`: a black hole mid-stream). Each drain is one
failover event. The next good
status brings it back ramping: its share cap grows linearly from 0 to 1 over `rampS`
seconds, so it is not flooded on return. A router that starts up ramps every cluster in
the same way from its first status (a restarted replica must not hand one cluster its
full share while the others are still ramping it back).

Ordering: every drain bumps the cluster's `epoch`; a poll carries the epoch it was sent
under, and an answer sent before a drain is dropped (it cannot undo the drain it did not
see). Requests waiting for a cluster's first byte register a callback with `hold`; a
drain calls them at once, so the server retries them elsewhere instead of waiting for
a timeout (nothing has reached their clients, so nothing is lost).

What this router sent since a cluster's last status: a status is up to `pollIntervalMs`
old, so a burst of requests (the continuations of a lost cluster's streams, or new
requests between two polls) would all go to the cluster that looked best at the poll.
Each `hold` taken since the last good status and not yet released (the request has no
first byte yet) counts in `ClusterState.sent_requests`, as the picker's
`Endpoint.sent_requests` counts what it dispatched since the last scrape; a good status
starts the count again (what was sent before it is in its load by then), and the choice
folds it into the cluster's load (`cluster_choice.load`).

A planned drain (`set_planned`: the operator's drain set, read from the store or a file)
drains at once and keeps the cluster out whatever its status says; lifting it ramps the
cluster back from zero over `rampS`, like a return. Planned drains are not failover
events (they must not page anyone); `igw_global_cluster_planned_drain` shows them.

Passive errors: every attempt's outcome moves the cluster's error EWMA (weight 0.1; a
broken or stalled stream is a failure, however its status line began). The EWMA decays
towards 0 with a half-life of `ERROR_HALF_LIFE_S` while nothing new is seen, so a
cluster that is ranked behind for its errors (`core/scheduling/cluster_choice.py`) is
tried again in time.

A status is hostile input like any other: it is validated (`ClusterStatus`: types,
ranges, finite numbers, at most 256 KiB), and a garbage answer drains the cluster
instead of crashing the router.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from inference_gateway.config.global_router import ClusterSpec, GlobalRouterSpec
from inference_gateway.core.request.attempts import Verdict
from inference_gateway.telemetry.global_metrics import GlobalMetrics

__all__ = ["MAX_STATUS_BYTES", "ClusterRegistry", "ClusterState", "ClusterStatus"]

log = logging.getLogger(__name__)
MAX_STATUS_BYTES = 256 * 1024  # a larger status is invalid (`ClusterStatus`'s bound)
ERROR_HALF_LIFE_S = 30.0  # the passive error EWMA halves in this long without news


class ClusterStatus(BaseModel):
    """The fields of a cluster gateway's `/status` the router uses (others ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    readyPods: int = Field(ge=0)
    stalePods: int = Field(default=0, ge=0)
    saturation: float = Field(ge=0, allow_inf_nan=False)
    kvUsage: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    queue: dict[str, float] = Field(default_factory=dict)
    tokensPerSecond: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    errorRate: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    costPerMillionTokens: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @property
    def queued(self) -> float:
        return sum(v for v in self.queue.values() if math.isfinite(v) and v > 0)


@dataclass
class ClusterState:
    spec: ClusterSpec
    status: ClusterStatus | None = None
    last_ok: float = -math.inf
    routable: bool = False
    ramp_started: float = -math.inf  # when it last came back
    epoch: int = 0  # bumped by every drain: a status sent under an older epoch is stale
    planned: bool = False  # in the operator's drain set: out whatever its status says
    held: dict[int, Callable[[], None]] = field(default_factory=dict)  # waiting for byte 1
    unseen: set[int] = field(default_factory=set)  # keys of `held` taken since the status
    ttft_ewma_s: float | None = None  # passive: first-byte latency seen by this router
    error_ewma: float = 0.0  # passive: share of this router's attempts that failed
    error_seen_at: float = 0.0  # when error_ewma was last brought up to date (decay)

    @property
    def error_rate(self) -> float:
        """The worse of the reported and the passively seen error rate."""
        reported = self.status.errorRate if self.status is not None else 0.0
        return max(reported, self.error_ewma)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def sent_requests(self) -> int:
        """Requests this router sent since the last good status and still waiting for
        their first byte: load the status cannot show yet (module docstring)."""
        return len(self.unseen)

    def ramp_fraction(self, now: float, ramp_s: float) -> float:
        if not self.routable:
            return 0.0
        if ramp_s <= 0:
            return 1.0
        return max(0.0, min(1.0, (now - self.ramp_started) / ramp_s))

    def cost_per_million(self) -> float | None:
        """USD per million generated tokens at capacity (the config's), or None."""
        return self.spec.cost_per_million_at_capacity()


@dataclass
class ClusterRegistry:
    spec: GlobalRouterSpec
    metrics: GlobalMetrics
    clock: Callable[[], float] = time.monotonic
    states: dict[str, ClusterState] = field(init=False)
    _held_keys: Iterator[int] = field(default_factory=itertools.count, init=False)

    def __post_init__(self) -> None:
        self.states = {c.name: ClusterState(c) for c in self.spec.clusters}
        for c in self.spec.clusters:
            self.metrics.healthy.labels(c.name, c.region).set(0)
            self.metrics.ramp.labels(c.name).set(0)
            self.metrics.planned.labels(c.name).set(0)
            cost = c.cost_per_million_at_capacity()
            if cost is not None:
                self.metrics.cost.labels(c.name).set(cost)

    # ------------------------------------------------------------------ transitions

    def drain(self, name: str, reason: str) -> None:
        state = self.states[name]
        state.epoch += 1  # even when already out: a status sent before this is stale
        if state.routable:
            state.routable = False
            if reason != "planned":
                self.metrics.failovers.labels(name, reason).inc()
            self.metrics.healthy.labels(name, state.spec.region).set(0)
            self.metrics.ramp.labels(name).set(0)
            log.warning("cluster %s drained (%s)", name, reason)
        self._release_held(state)

    def _release_held(self, state: ClusterState) -> None:
        held, state.held = state.held, {}
        state.unseen.clear()
        for retry in held.values():
            retry()

    def hold(self, name: str, on_drain: Callable[[], None]) -> int:
        """Register a request waiting for `name`'s first byte; `on_drain` runs (once) if
        the cluster is drained meanwhile. Returns the key for `release`."""
        key = next(self._held_keys)
        state = self.states[name]
        state.held[key] = on_drain
        state.unseen.add(key)
        return key

    def release(self, name: str, key: int) -> None:
        """The request's first byte came, or it left the cluster before one."""
        state = self.states[name]
        state.held.pop(key, None)
        state.unseen.discard(key)

    def heartbeat(self, name: str, status: ClusterStatus, epoch: int | None = None) -> None:
        """A good status. `epoch`: the cluster's epoch when the poll was sent; an answer
        that crossed a drain is dropped."""
        state = self.states[name]
        if epoch is not None and epoch != state.epoch:
            log.debug("status of %s sent before its drain: ignored", name)
            return
        now = self.clock()
        state.status, state.last_ok = status, now
        state.unseen.clear()  # what was sent before it is in its load now
        if not state.routable and not state.planned:
            self._admit(state, now)
        self.metrics.saturation.labels(name).set(status.saturation)

    def _admit(self, state: ClusterState, now: float) -> None:
        """Routable again, its share ramping from zero (at start-up too)."""
        returned = state.ramp_started != -math.inf
        state.routable = True
        state.ramp_started = now
        self.metrics.healthy.labels(state.name, state.spec.region).set(1)
        log.info("cluster %s routable, ramping %s", state.name, "back" if returned else "in")

    def set_planned(self, names: Iterable[str]) -> None:
        """The operator's drain set (unknown names are ignored: another fleet's, or a typo
        the CLI already refused). Newly listed clusters drain at once; a lifted one is
        admitted, ramping, if its last status is fresh (else at its next status)."""
        wanted = frozenset(names)
        now = self.clock()
        fresh = self.spec.stale_after_ms / 1000
        for state in self.states.values():
            planned = state.name in wanted
            if planned == state.planned:
                continue
            state.planned = planned
            self.metrics.planned.labels(state.name).set(1 if planned else 0)
            if planned:
                self.drain(state.name, "planned")
            else:
                log.info("cluster %s: planned drain lifted", state.name)
                if state.status is not None and now - state.last_ok <= fresh:
                    self._admit(state, now)

    def observe_ttft(self, name: str, seconds: float) -> None:
        state = self.states[name]
        prev = state.ttft_ewma_s
        state.ttft_ewma_s = seconds if prev is None else 0.8 * prev + 0.2 * seconds

    def observe_outcome(self, name: str, failed: bool) -> None:
        """Passive learning: every attempt moves the error EWMA (weight 0.1)."""
        state = self.states[name]
        self._decay(state, self.clock())
        state.error_ewma = 0.9 * state.error_ewma + (0.1 if failed else 0.0)

    def learn(self, name: str, verdict: Verdict, reason: str) -> None:
        """What an attempt that ended before its first byte teaches (the attempt plan's
        verdict): a cluster that is gone is drained (`reason`), a failure moves the error
        EWMA. `igw global` and the fleet simulator both call this."""
        if verdict.drain:
            self.drain(name, reason)
        if verdict.failed:
            self.observe_outcome(name, failed=True)

    @staticmethod
    def _decay(state: ClusterState, now: float) -> None:
        if now > state.error_seen_at:
            state.error_ewma *= 0.5 ** ((now - state.error_seen_at) / ERROR_HALF_LIFE_S)
        state.error_seen_at = now

    def check_staleness(self) -> None:
        now = self.clock()
        limit = self.spec.stale_after_ms / 1000
        for state in self.states.values():
            self._decay(state, now)
            if state.routable and now - state.last_ok > limit:
                self.drain(state.name, "status_stale")
            self.metrics.ramp.labels(state.name).set(state.ramp_fraction(now, self.spec.ramp_s))

    def routable(self) -> list[ClusterState]:
        self.check_staleness()
        return [s for s in self.states.values() if s.routable]
