"""The fleet tier on the simulator's clock: clusters of emulated pods behind the global router.

Each cluster is a fleet of emulated pods with its own gateway policy in front (the same
`make_policy` policies as a single-cluster run, admission included). One global router
per client region runs `igw global`'s own `ClusterRegistry` (the core's, heartbeats, drain,
ramp-back, and the requests sent since each cluster's last status, held through `hold`
as `server._open` holds them; its clock is the virtual one) and `rank_clusters` (its
random draw from a seeded generator), so what is measured here is the code that routes
in production.

The router sees a cluster only the way `igw global` does:

* its status, polled every `pollIntervalMs` (the same fields and window rules as
  `frontends/status.py`, validated by `ClusterStatus`), arriving one round trip later;
  a poll of a dead cluster fails one round trip later and drains it (`connect_failed`);
* its answers, judged by `igw global`'s own attempt plan (`core/request/attempts.py`,
  learnt through `ClusterRegistry.learn`): a refused or dropped connection drains the
  cluster and moves the request to the next cluster of its ranking that is still
  routable; a 429 or 503 from the cluster's admission moves it without draining;
  `firstByteTimeoutMs` without a first token ends it with 504 (the cluster may be
  generating it: never a second generation); the first token updates the router's
  first-byte EWMA, an answer's end (or a lost stream) its error EWMA;
* a drain (however the router learnt it) retries at once the requests that router still
  waits on there without a first token (`ClusterRegistry.hold`, as `server._open`); the
  cluster's work on an abandoned attempt goes on, but its answer is dropped.

A killed cluster's gateway answers nothing more: requests it held that had not streamed
a token are dropped with the connection and retried elsewhere; a stream that had breaks
after its first byte (`_cut`). Where the router's `migration` is on (`igw global`'s
default) the router resumes it as `server._continue` does, once it sees the break (one
way later; in a black hole at `streamIdleTimeoutMs`): the continuation, the delivered
tokens appended to the prompt, goes to the best routable cluster not tried yet, ranked
at the break (`_resume`), each try read as a first attempt, within `maxAttempts`, `maxResumes` and
`deadlineMs`; without it, or with no cluster left, the stream is lost. What became of
the cut streams (lost, resumed, re-prefill GPU seconds, the resume gap) is counted by
the single-cluster simulator's `sim.faults.StreamLedger`. A restored cluster starts cold
(new pods, new gateway state).

A `drain` / `undrain` event is `igw global drain/undrain`: the operator's drain set
changes, and every router applies it at once (`ClusterRegistry.set_planned`; a real
router reads the set before its next poll, within `pollIntervalMs`): the cluster leaves
the rankings without a failover event, requests held there without a first token are
retried, and streams already running finish (the cluster stays up). An undrain admits
the cluster again, ramping over `rampS`. Every message between a router and a cluster
takes half the region pair's round trip (`network`), so cross-region traffic pays it in
TTFT. The global
routers themselves stay up (a region's clients are assumed to keep reaching theirs).
Events run on the single-cluster simulator's one event heap (`driver.EventHeap`).
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from inference_gateway.config.global_router import GlobalRouterSpec
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.request.attempts import AttemptPlan, Failure
from inference_gateway.core.request.relay import StreamEnd
from inference_gateway.core.scheduling.cluster_choice import (
    RequestTraits,
    mean_kv_usage,
    rank_clusters,
)
from inference_gateway.core.scheduling.cluster_registry import ClusterRegistry, ClusterStatus
from inference_gateway.core.traffic.flow_control import BANDS, FlowController
from inference_gateway.emulator.engine import EngineRequest
from inference_gateway.sim.driver import EventHeap
from inference_gateway.sim.faults import StreamLedger
from inference_gateway.sim.fleet.report import FleetRecorder
from inference_gateway.sim.fleet.scenario import (
    SHEDDABLE_OBJECTIVE,
    ClusterSimSpec,
    FleetScenario,
    router_spec,
)
from inference_gateway.sim.pods import SimPod, build_fleet, scrape
from inference_gateway.sim.policies import DEFERRED, make_policy
from inference_gateway.sim.workload import SimRequest, generate, prefix_block_ids
from inference_gateway.telemetry.global_metrics import GlobalMetrics

__all__ = ["FleetTier"]

ENGINE, SCRAPE, MESSAGE, POLL, EVENT, ARRIVAL = range(6)  # order at equal times
DRAIN_FACTOR = 4.0  # stop waiting for stragglers after this many scenario durations
STATUS_WINDOW_S = 10.0  # frontends/status.py's rate window


@dataclass(slots=True, eq=False)
class FleetRequest:
    """One client request through the global tier, across its attempts."""

    sim: SimRequest
    router: SimRouter
    traits: RequestTraits
    attempts: list[str]  # the ranking on arrival (a continuation's: at the break)
    tried: list[str] = field(default_factory=list)  # every cluster an attempt went to
    attempt: int = 0  # attempts made before the current one
    index: int = 0  # the current attempt's place in `attempts`
    seq: int = 0  # bumped per attempt: a callback of an earlier attempt is stale
    at: str | None = None  # the cluster the current attempt waits on or streams from
    hold_key: int | None = None
    sent_at: float = 0.0
    first_token: float | None = None  # when the client saw it (a continuation's: still it)
    streaming: bool = False  # the current attempt's first token came
    resumes: int = 0  # continuations opened (`migration.maxResumes` at most)
    dropped: bool = False  # a dead cluster dropped or swallowed one of its attempts
    refused_at: float | None = None  # last time a dead cluster dropped it


class ClusterMeter:
    """The cluster gateway's status window: tokens, answers and 5xx since ~10 s ago."""

    def __init__(self) -> None:
        self.tokens = 0
        self.answers = 0
        self.errors = 0
        self._samples: deque[tuple[float, int, int, int]] = deque()

    def rates(self, now: float) -> tuple[float, float]:
        """(tokens/s, error rate) over the window, as `StatusTracker.status` measures."""
        self._samples.append((now, self.tokens, self.answers, self.errors))
        while len(self._samples) > 2 and now - self._samples[1][0] >= STATUS_WINDOW_S:
            self._samples.popleft()
        then, tokens, answers, errors = self._samples[0]
        elapsed = now - then
        tokens_per_s = (self.tokens - tokens) / elapsed if elapsed > 0 else 0.0
        answered = self.answers - answers
        return tokens_per_s, (self.errors - errors) / answered if answered > 0 else 0.0


class Incarnation:
    """One life of a cluster gateway and its pods, from a (re)start to its death."""

    def __init__(self, tier: FleetTier, cluster: SimCluster, now: float) -> None:
        self.tier = tier
        self.cluster = cluster
        self.alive = True
        self.pods: list[SimPod] = build_fleet(cluster.spec.fleet, self)
        self.policy: Any = make_policy(cluster.spec.policy, self.pods, tier.seed_for(cluster))
        self.requests: dict[int, FleetRequest] = {}
        self.meter = ClusterMeter()
        self.flow = getattr(self.policy, "controller", None) or FlowController(
            GatewayConfigSpec().flow_control
        )
        self.pools: dict[str, list[Any]] = {}
        for pod in self.pods:
            self.pools.setdefault(pod.pool.name, []).append(pod.endpoint)
            scrape(pod, now)

    # engine listener ---------------------------------------------------------------

    def on_first_token(self, request: EngineRequest, time: float) -> None:
        if self.alive:
            req, pod = request.tag
            self.policy.on_first_token(req.sim, pod, time - request.arrival, time)
            self.tier.first_token(req, self.cluster, pod, time)

    def on_finish(self, request: EngineRequest, time: float) -> None:
        if self.alive:
            req, pod = request.tag
            self.requests.pop(req.sim.request_id, None)
            self.meter.tokens += request.prompt_tokens + request.output_tokens
            self.meter.answers += 1
            self.policy.on_finished(req.sim, pod, time)
            self.tier.finished(req, self.cluster, time)

    def on_step(self, time: float) -> None:
        return None

    # the status endpoint -------------------------------------------------------------

    def status(self, now: float) -> ClusterStatus:
        tokens_per_s, error_rate = self.meter.rates(now)
        ready = [
            p.endpoint.metrics
            for p in self.pods
            if not p.endpoint.stale and p.endpoint.metrics is not None
        ]
        hourly = self.cluster.hourly_usd
        return ClusterStatus.model_validate(
            {
                "readyPods": len(ready),
                "stalePods": len(self.pods) - len(ready),
                "saturation": max(self.flow.saturation(e) for e in self.pools.values()),
                "kvUsage": mean_kv_usage(ready),
                "queue": {b: self.flow.queued(b) for b in BANDS},
                "tokensPerSecond": tokens_per_s,
                "errorRate": error_rate,
                "costPerMillionTokens": (
                    hourly / (tokens_per_s * 3600) * 1e6 if tokens_per_s > 0 else None
                ),
            }
        )


@dataclass(slots=True, eq=False)
class SimCluster:
    spec: ClusterSimSpec
    hourly_usd: float
    live: Incarnation | None = None
    silent: bool = False  # down as a black hole (no answer at all), not refusing

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def region(self) -> str:
        return self.spec.region


class SimRouter:
    """One `igw global` deployment (the one in `region`), on the virtual clock."""

    def __init__(
        self, region: str, spec: GlobalRouterSpec, clock: Callable[[], float], seed: int
    ) -> None:
        self.region = region
        self.spec = spec
        self.metrics = GlobalMetrics()
        self.registry = ClusterRegistry(spec, self.metrics, clock=clock)
        self.random = random.Random(seed)

    def rank(
        self, traits: RequestTraits, now: float, exclude: list[str] | None = None
    ) -> list[str]:
        """The clusters to try, in order (`igw global`'s own ranking), less `exclude`."""
        choice = rank_clusters(
            self.spec, self.registry.routable(), traits, now, self.random.random, exclude or ()
        )
        return [s.name for s in choice.ranked]

    def home_full(self, now: float) -> bool:
        """A home-region cluster is routable and fully ramped (the home region is in)."""
        ramp = self.spec.ramp_s
        return any(
            s.routable and s.spec.region == self.region and s.ramp_fraction(now, ramp) >= 1
            for s in self.registry.states.values()
        )


@dataclass
class FleetTier:
    scenario: FleetScenario
    profile: str
    capacity_rps: float
    now: float = 0.0
    # generated tokens per second each cluster sustains (the config's capacity: cost)
    capacity_tokens_per_s: dict[str, float] | None = None
    events: EventHeap = field(default_factory=EventHeap)

    def __post_init__(self) -> None:
        scenario = self.scenario
        self.spec = router_spec(scenario, self.profile, self.capacity_tokens_per_s)
        # `igw global`'s own, resuming a broken stream where its `migration` says so
        self.plan = AttemptPlan(self.spec.max_attempts, resume=self.spec.migration.resumes)
        self.clusters = {
            c.name: SimCluster(c, self.spec.clusters[i].hourly_cost_usd)
            for i, c in enumerate(scenario.clusters)
        }
        shares = scenario.shares()
        self.routers = {
            region: SimRouter(region, self.spec, self.clock, scenario.seed + 101 * (i + 1))
            for i, region in enumerate(shares)
        }
        self._regions = list(shares)
        self._region_cdf = list(itertools.accumulate(shares.values()))
        self._region_random = random.Random(scenario.seed ^ 0xC11E47)
        self.recorder = FleetRecorder(scenario, self.profile, self.clusters, self.spec.ramp_s)
        self.ledger = StreamLedger()  # what became of the streams the kills cut
        self.open = 0  # requests not yet done
        self.planned: set[str] = set()  # the operator's drain set (`igw global drain`)

    def clock(self) -> float:
        return self.now

    def seed_for(self, cluster: SimCluster) -> int:
        return self.scenario.seed + 7919 * list(self.clusters).index(cluster.name)

    def later(self, t: float, kind: int, payload: Any) -> None:
        self.events.push(t, kind, payload)

    def one_way(self, router: SimRouter, cluster: SimCluster) -> float:
        return self.scenario.network.rtt_s(router.region, cluster.region) / 2

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        scenario = self.scenario
        for cluster in self.clusters.values():
            cluster.live = Incarnation(self, cluster, 0.0)
        for router in self.routers.values():  # igw global polls once before serving
            for cluster in self.clusters.values():
                assert cluster.live is not None
                router.registry.heartbeat(cluster.name, cluster.live.status(0.0))
        arrivals = generate(
            scenario.workload, scenario.duration_s, scenario.seed, self.capacity_rps
        )
        first = next(arrivals, None)
        if first is not None:
            self.later(first.t, ARRIVAL, first)
        scrape_s = scenario.scrape_interval_ms / 1000
        poll_s = self.spec.poll_interval_ms / 1000
        self.later(scrape_s, SCRAPE, None)
        self.later(poll_s, POLL, None)
        for event in scenario.events:
            self.later(event.at_s, EVENT, event)
        deadline = scenario.duration_s * DRAIN_FACTOR
        while self.events:
            t, kind, payload = self.events.pop()
            if t > deadline:
                break
            self.now = t
            if kind == ENGINE:
                self._engine_step(*payload)
            elif kind == MESSAGE:
                payload()
            elif kind == ARRIVAL:
                nxt = next(arrivals, None)
                if nxt is not None:
                    self.later(nxt.t, ARRIVAL, nxt)
                self.arrive(payload)
            elif kind == SCRAPE:
                for cluster in self.clusters.values():
                    if cluster.live is not None:
                        for pod in cluster.live.pods:
                            scrape(pod, t)
                        self._drain(cluster.live)
                if t < scenario.duration_s or self.open:
                    self.later(t + scrape_s, SCRAPE, None)
            elif kind == POLL:
                self.poll()
                if t < scenario.duration_s or self.open:
                    self.later(t + poll_s, POLL, None)
            else:
                self.fleet_event(payload)
        return self.recorder.report(self.routers, self.ledger)

    # ------------------------------------------------------------------ requests

    def arrive(self, sim: SimRequest) -> None:
        i = 0
        if len(self._regions) > 1:
            u = self._region_random.random()
            i = next((k for k, c in enumerate(self._region_cdf) if u < c), len(self._regions) - 1)
        router = self.routers[self._regions[i]]
        sheddable = sim.priority == SHEDDABLE_OBJECTIVE
        traits = RequestTraits(
            router.region, self.spec.profile, sheddable and bool(self.spec.sheddable_objectives)
        )
        attempts = router.rank(traits, self.now)
        req = FleetRequest(sim, router, traits, attempts)
        self.open += 1
        self.recorder.on_arrival(req)
        if not attempts:
            self._fail(req, "unanswered", self.plan.nothing_routable().status)
            return
        self._send(req)

    def _send(self, req: FleetRequest) -> None:
        name = req.attempts[req.index]
        cluster = self.clusters[name]
        router = req.router
        attempt = "resume" if req.first_token is not None else "retry" if req.attempt else "first"
        router.metrics.decisions.labels(name, self.spec.profile, attempt).inc()
        req.sent_at = self.now
        req.seq += 1
        req.at = name
        req.tried.append(name)
        req.streaming = False
        seq = req.seq
        req.hold_key = router.registry.hold(
            name, lambda: self.later(self.now, MESSAGE, self._current(req, seq, self._drained))
        )
        self.recorder.on_attempt(req, cluster, self.now, router.home_full(self.now))
        self.later(
            self.now + self.one_way(router, cluster), MESSAGE, lambda: self._deliver(req, cluster)
        )
        wait = min(self.spec.first_byte_timeout_ms, self.spec.read_timeout_ms) / 1000
        self.later(self.now + wait, MESSAGE, self._current(req, seq, self._first_byte_timeout))

    def _current(
        self, req: FleetRequest, seq: int, then: Callable[[FleetRequest], None]
    ) -> Callable[[], None]:
        """`then(req)` if the attempt it was scheduled for is still the one waiting for a
        first token (a drain, a timeout and a refusal can race for one attempt)."""

        def run() -> None:
            if req.seq == seq and req.at is not None and not req.streaming:
                then(req)

        return run

    def _give_up(self, req: FleetRequest) -> SimCluster:
        """End the current attempt before its first token: the router closes the
        connection, so the cluster's answer (if it ever comes) is dropped."""
        assert req.at is not None
        cluster = self.clusters[req.at]
        if req.hold_key is not None:
            req.router.registry.release(cluster.name, req.hold_key)
            req.hold_key = None
        if cluster.live is not None:
            cluster.live.requests.pop(req.sim.request_id, None)
        req.at = None
        return cluster

    def _deliver(self, req: FleetRequest, cluster: SimCluster) -> None:
        live = cluster.live
        seq = req.seq
        if req.at != cluster.name:
            return  # the router gave this attempt up on the way (a drain)
        if live is None:
            req.dropped = True
            refused = self._current(req, seq, self._refused)
            if cluster.silent:  # no answer: the connect timeout fails it
                at = max(self.now, req.sent_at + self.spec.connect_timeout_ms / 1000)
                self.later(at, MESSAGE, refused)
            else:  # nothing listens: the connection is refused
                self._reply(req, cluster, refused)
            return
        live.requests[req.sim.request_id] = req
        pod = live.policy.route(req.sim, self.now)
        if pod is DEFERRED:
            return
        if pod is None:  # the cluster's admission refused it (pool saturated)
            del live.requests[req.sim.request_id]
            live.meter.answers += 1
            self._reply(req, cluster, self._current(req, seq, partial(self._rejected, status=429)))
            return
        self._start(live, req, pod)

    def _start(self, live: Incarnation, req: FleetRequest, pod: SimPod) -> None:
        sim = req.sim
        hashes = (
            prefix_block_ids(sim.prefix_group, sim.prefix_tokens)
            if sim.prefix_group is not None
            else ()
        )
        engine_request = EngineRequest(
            sim.request_id, sim.prompt_tokens, sim.output_tokens, hashes, sim.adapter,
            tag=(req, pod),
        )  # fmt: skip
        engine = pod.engine
        before = engine.busy_until
        if before is not None and before <= self.now:
            engine.advance(self.now)
        engine.submit(engine_request, self.now)
        busy = engine.busy_until
        if busy is not None and busy != before:
            self.later(busy, ENGINE, (live, pod))

    def _engine_step(self, live: Incarnation, pod: SimPod) -> None:
        engine = pod.engine
        if not live.alive or engine.busy_until != self.now:
            return  # a dead cluster, or superseded by a cut segment
        engine.advance(self.now)
        busy = engine.busy_until
        if busy is not None:
            self.later(busy, ENGINE, (live, pod))
        self._drain(live)

    def _drain(self, live: Incarnation) -> None:
        drain = getattr(live.policy, "drain", None)
        if drain is None:
            return
        for sim, pod in drain(self.now):
            req = live.requests.get(sim.request_id)
            if req is None:
                continue
            if pod is None:  # its queue TTL passed: 503 from the cluster
                del live.requests[sim.request_id]
                live.meter.answers += 1
                live.meter.errors += 1
                rejected = self._current(req, req.seq, partial(self._rejected, status=503))
                self._reply(req, live.cluster, rejected)
            else:
                self._start(live, req, pod)

    def _reply(self, req: FleetRequest, cluster: SimCluster, then: Callable[[], None]) -> None:
        self._reply_to(req.router, cluster, then)

    def first_token(self, req: FleetRequest, cluster: SimCluster, pod: SimPod, time: float) -> None:
        """The current attempt's first token reaches the router one way later; a
        continuation's closes the resume gap (`server._continue` feeds no first-byte
        EWMA: its TTFT is a re-prefill's, not a fresh request's)."""
        if req.at != cluster.name or req.streaming:
            return  # an attempt the router gave up: its answer is dropped
        seen = time + self.one_way(req.router, cluster)
        req.streaming = True
        registry = req.router.registry
        if req.hold_key is not None:
            registry.release(cluster.name, req.hold_key)
            req.hold_key = None
        if req.first_token is None:
            req.first_token = seen
            registry.observe_ttft(cluster.name, seen - req.sent_at)
        else:
            self.ledger.first_token(req.sim, pod, seen)

    def finished(self, req: FleetRequest, cluster: SimCluster, time: float) -> None:
        if req.at != cluster.name:
            return  # an attempt the router gave up
        self.open -= 1
        self._answered(req, cluster, "200", failed=False)
        assert req.first_token is not None
        _, tokens = self.ledger.finished(req.sim, req.first_token, req.sim.output_tokens)
        self.recorder.on_served(req, cluster, time + self.one_way(req.router, cluster), tokens)

    def _answered(self, req: FleetRequest, cluster: SimCluster, code: str, *, failed: bool) -> None:
        """`server._ended`: an answer relayed to its end, counted and learnt once."""
        router = req.router
        cross = "true" if cluster.region != router.region else "false"
        router.metrics.requests.labels(cluster.name, cluster.region, cross, code).inc()
        router.registry.observe_outcome(cluster.name, failed=failed)

    def _ended(self, req: FleetRequest, failure: Failure) -> None:
        """An attempt ended before its first token: the attempt plan's verdict, exactly as
        `server._forward` applies it (drain, error score, the next cluster or the end)."""
        cluster = self._give_up(req)
        verdict = self.plan.after_failure(failure)
        req.router.registry.learn(cluster.name, verdict, failure.value)
        req.refused_at = self.now
        index = self._next_index(req) if verdict.retry else None
        if index is None:
            self._fail(req, "unanswered", verdict.status)
            return
        req.router.metrics.retries.labels(cluster.name, failure.value).inc()
        self._retry(req, index)

    def _refused(self, req: FleetRequest) -> None:
        """A refused or dropped connection."""
        self._ended(req, Failure.REFUSED)

    def _drained(self, req: FleetRequest) -> None:
        """The registry drained the cluster this attempt waits on (`server._open`)."""
        self._ended(req, Failure.DRAINED)

    def _first_byte_timeout(self, req: FleetRequest) -> None:
        """`firstByteTimeoutMs` (or `readTimeoutMs`) of silence: the cluster may be
        generating it, so the request ends with 504 (no second generation elsewhere)."""
        self._ended(req, Failure.TIMEOUT)

    def _rejected(self, req: FleetRequest, status: int) -> None:
        """A 429/503 answer from the cluster's admission: the next cluster while one is
        left (not drained), else the answer goes back to the client as it came."""
        cluster = self._give_up(req)
        verdict = self.plan.after_status(status)
        index = self._next_index(req) if verdict.retry else None
        if index is None:
            self._answered(req, cluster, str(status), failed=verdict.failed)
            if req.first_token is not None:  # a continuation: the stream ends
                self._lose_stream(req)
                return
            self.open -= 1
            self.recorder.on_failed(req, "rejected", self.now)
            return
        req.router.registry.learn(cluster.name, verdict, str(status))
        req.router.metrics.retries.labels(cluster.name, str(status)).inc()
        self._retry(req, index)

    def _next_index(self, req: FleetRequest) -> int | None:
        """The plan's next cluster of the request's ranking (made on arrival; a
        continuation's at the break), still routable, within `maxAttempts`."""
        states = req.router.registry.states
        return self.plan.next_index(
            req.attempts, req.index, req.attempt + 1, lambda name: states[name].routable
        )

    def _retry(self, req: FleetRequest, index: int) -> None:
        req.attempt += 1
        req.index = index
        self._send(req)

    def _fail(self, req: FleetRequest, outcome: str, status: int) -> None:
        """The request ends unanswered (`status`); a continuation's stream ends with
        the SSE error event instead (its 200 went out with the first token)."""
        if req.first_token is not None:
            self._lose_stream(req)
            return
        self.open -= 1
        if req.dropped:  # a lost cluster had it before its first token
            self.ledger.never_started()
        req.router.metrics.failed.labels(str(status)).inc()
        self.recorder.on_failed(req, outcome, self.now)

    # ------------------------------------------------------------------ heartbeats

    def poll(self) -> None:
        """Every router asks every cluster for its status; the cluster answers when the
        request reaches it (half a round trip), the answer takes the other half."""
        timeout = self.spec.status_timeout_ms / 1000
        for router in self.routers.values():
            router.registry.check_staleness()
            for cluster in self.clusters.values():
                one_way = self.one_way(router, cluster)
                if 2 * one_way > timeout:  # the poll times out: drained as unreachable
                    drain = partial(router.registry.drain, cluster.name, "connect_failed")
                    self.later(self.now + timeout, MESSAGE, drain)
                else:
                    epoch = router.registry.states[cluster.name].epoch  # as server._poll
                    status = partial(self._status, router, cluster, epoch)
                    self.later(self.now + one_way, MESSAGE, status)

    def _status(self, router: SimRouter, cluster: SimCluster, epoch: int) -> None:
        live = cluster.live
        if live is None:
            drain = partial(router.registry.drain, cluster.name, "connect_failed")
            if cluster.silent:  # the poll times out
                sent = self.now - self.one_way(router, cluster)
                self.later(sent + self.spec.status_timeout_ms / 1000, MESSAGE, drain)
            else:  # refused: the poll fails one way later
                self._reply_to(router, cluster, drain)
        else:
            status = live.status(self.now)
            self._reply_to(
                router, cluster, partial(router.registry.heartbeat, cluster.name, status, epoch)
            )

    def _reply_to(self, router: SimRouter, cluster: SimCluster, then: Callable[[], None]) -> None:
        self.later(self.now + self.one_way(router, cluster), MESSAGE, then)

    # ------------------------------------------------------------------ faults

    def fleet_event(self, event: Any) -> None:
        changed = []
        for name in self.scenario.targets(event):
            cluster = self.clusters[name]
            if event.action == "kill" and cluster.live is not None:
                self._kill(cluster, silent=event.failure == "blackhole")
                changed.append(name)
            elif event.action == "restore" and cluster.live is None:
                cluster.live = Incarnation(self, cluster, self.now)
                cluster.silent = False
                changed.append(name)
            elif event.action == "drain" and name not in self.planned:
                self.planned.add(name)
                changed.append(name)
            elif event.action == "undrain" and name in self.planned:
                self.planned.discard(name)
                changed.append(name)
        if event.action in ("drain", "undrain"):
            for router in self.routers.values():
                router.registry.set_planned(self.planned)
        self.recorder.on_event(event, changed, self.now)

    def _kill(self, cluster: SimCluster, *, silent: bool) -> None:
        """The cluster's gateway and pods stop. `silent` (a black hole): nothing answers
        any more, so held requests wait for the router's read timeout; otherwise their
        connections drop at once and the router learns one way later. A stream already
        running breaks (`_cut`)."""
        live = cluster.live
        assert live is not None
        generated: dict[FleetRequest, int] = {}  # each running attempt's tokens so far
        for pod in live.pods:
            engine = pod.engine
            engine.advance(self.now)  # every step that ended by now was delivered
            for request in engine.requests():
                generated[request.tag[0]] = request.generated(engine.clock)
        live.alive = False
        cluster.live, cluster.silent = None, silent
        for req in list(live.requests.values()):
            if req.streaming:
                self._cut(req, cluster, generated.get(req, 0), silent)
            else:  # no first token yet: the connection drops, the router retries it
                req.dropped = True
                if not silent:
                    self._reply(req, cluster, self._current(req, req.seq, self._refused))
                # silent: the request waits for the drain or its first-byte timeout (_send)
        live.requests.clear()

    def _cut(self, req: FleetRequest, cluster: SimCluster, generated: int, silent: bool) -> None:
        """A running stream breaks with its cluster. Where the router resumes
        (`migration`, within `maxResumes`), the continuation (the delivered tokens
        appended to the prompt, `sim.faults.StreamLedger`) waits for the router to see
        the break; otherwise the stream is lost."""
        resume = self.plan.resume and req.resumes < self.spec.migration.max_resumes
        # the last chunk before the break reached the router by then (within one step)
        broke_at = self.now + self.one_way(req.router, cluster)
        assert req.first_token is not None
        continuation = self.ledger.cut(req.sim, req.first_token, generated, broke_at, resume=resume)
        if continuation is None:
            self.open -= 1
            self.recorder.on_failed(req, "lost_started", self.now)
        else:
            req.sim = continuation
        self._stream_lost(req, cluster, silent, resume=continuation is not None)

    def _stream_lost(
        self, req: FleetRequest, cluster: SimCluster, silent: bool, *, resume: bool
    ) -> None:
        """What the router learns from a started stream the cluster lost (`server._relay`
        with the shared relay, `server._continue` with the Resumer): a cut one breaks one
        way later (`stream_broken`); in a black hole it goes silent and ends at
        `streamIdleTimeoutMs` (`stream_stalled`). The attempt plan's `after_break` says
        what that means: a failure in the cluster's error score, a stalled cluster
        drained, and (`resume`) the continuation to the next cluster."""
        end = StreamEnd.STALLED if silent else StreamEnd.BROKEN

        def broke() -> None:
            verdict = self.plan.after_break(end)
            if verdict.drain:
                req.router.registry.drain(cluster.name, "stream_stalled")
            self._answered(req, cluster, end.value, failed=verdict.failed)
            if resume:
                self._resume(req, verdict.retry)

        if silent:
            self.later(self.now + self.spec.stream_idle_timeout_ms / 1000, MESSAGE, broke)
        else:
            self._reply(req, cluster, broke)

    def _resume(self, req: FleetRequest, retry: bool) -> None:
        """`server._continue`: the continuation goes to the best routable cluster not
        tried yet, ranked at the break (the clusters as they are then, what the router
        sent since each one's status counted, so a lost cluster's streams spread), then
        down that ranking (within `maxAttempts`), each try read as a first attempt
        (`_send`: refused or drained moves on, silent past `firstByteTimeoutMs` ends it);
        past `migration.deadlineMs` from the break without a first token the resume
        ends (the Resumer's deadline)."""
        if retry:
            req.attempts = req.router.rank(req.traits, self.now, req.tried)
            req.index = -1
        index = self._next_index(req) if retry else None
        if index is None:
            self._lose_stream(req)
            return
        req.resumes += 1
        resumes = req.resumes

        def past_deadline() -> None:
            if req.resumes == resumes and req.at is not None and not req.streaming:
                self._give_up(req)
                self._lose_stream(req)

        self.later(self.now + self.spec.migration.deadline_ms / 1000, MESSAGE, past_deadline)
        self._retry(req, index)

    def _lose_stream(self, req: FleetRequest) -> None:
        """No cluster took the continuation: the client's stream ends with the SSE error
        event, the request lost after its first token."""
        self.ledger.give_up(req.sim)
        self.open -= 1
        self.recorder.on_failed(req, "lost_started", self.now)
