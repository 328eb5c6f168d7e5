"""The discrete-event driver: a heap of `(time, kind, sequence, payload)`.

At equal times engine step ends run first (the kinds are ordered), then metric scrapes,
then arrivals, then KV reads of disaggregated requests (`disagg`), and the
sequence number (itertools.count) keeps everything else in insertion order, so a
scenario and seed always replay identically. Routers see pods only through scrapes at
`scrape_interval_ms`, exactly as a production picker would.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from inference_gateway.emulator.engine import EngineRequest
from inference_gateway.sim.disagg import PrefillLeg, Split, Transfers
from inference_gateway.sim.faults import FaultInjector
from inference_gateway.sim.kv_feed import FleetKVFeed, SimClock
from inference_gateway.sim.metrics import Observer
from inference_gateway.sim.pods import SimPod, build_fleet, scrape
from inference_gateway.sim.policies import DEFERRED, Policy, make_policy
from inference_gateway.sim.scenario import Scenario
from inference_gateway.sim.workload import Sessions, SimRequest, generate, shared_blocks

__all__ = ["EventHeap", "run_policy"]

ENGINE, SCRAPE, ARRIVAL, FOLLOW_UP, KV_READ, FAULT = 0, 1, 2, 3, 4, 5
DRAIN_FACTOR = 4.0  # stop waiting for stragglers after this many scenario durations


class EventHeap:
    """The simulator's one event queue, for a single cluster (`run_policy`) and the fleet
    tier (`fleet.tier.FleetTier`) alike: `(time, kind, sequence, payload)`, popped in
    time order, then by kind (the caller's order at equal times), then in insertion
    order (`itertools.count`), so a run replays identically."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def push(self, t: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._heap, (t, kind, next(self._seq), payload))

    def pop(self) -> tuple[float, int, Any]:
        t, kind, _, payload = heapq.heappop(self._heap)
        return t, kind, payload

    def __len__(self) -> int:
        return len(self._heap)


class _Listener:
    """Routes engine callbacks to the observer and the policy; a prefill leg's (tagged
    with its `PrefillLeg`) to the transfers, its one token never reaching the client."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.policy: Policy | None = None
        self.follow_up: Callable[[SimRequest, float], None] | None = None
        self.transfers: Transfers | None = None
        self.faults: FaultInjector | None = None

    def on_first_token(self, request: EngineRequest, time: float) -> None:
        tag = request.tag
        if type(tag) is PrefillLeg:
            return
        sim, pod = tag
        assert self.policy is not None
        self.policy.on_first_token(sim, pod, time - request.arrival, time)
        if self.faults is not None:
            self.faults.ledger.first_token(sim, pod, time)

    def on_finish(self, request: EngineRequest, time: float) -> None:
        tag = request.tag
        if type(tag) is PrefillLeg:
            assert self.transfers is not None
            ended = getattr(self.policy, "on_prefill_finished", None)
            if ended is not None:
                ended(tag.request, tag.split.prefill, time - tag.sent, time)
            self.transfers.prefilled(tag, time)
            return
        sim, pod = tag
        assert self.policy is not None and request.first_token_time is not None
        if self.transfers is not None:
            self.transfers.finished(sim.request_id)
        first, tokens = request.first_token_time, request.output_tokens
        if self.faults is not None:  # a resumed stream: its client's first token and all
            first, tokens = self.faults.ledger.finished(sim, first, tokens)
        # TTFT counts from the client's arrival, so time queued in the gateway counts too
        self.observer.on_finish(sim.t, first, time, tokens, sim.priority)
        self.policy.on_finished(sim, pod, time)
        if sim.session >= 0 and self.follow_up is not None:
            self.follow_up(sim, time)

    def on_step(self, time: float) -> None:
        return None


def run_policy(
    scenario: Scenario,
    policy_name: str,
    capacity_rps: float,
    *,
    progress: Callable[[float], None] | None = None,
    ttft_quantiles: Sequence[float] = (),
) -> dict[str, Any]:
    """Simulate the scenario under one policy and return its report (with the TTFT at
    each of `ttft_quantiles`, percentiles, when given: `Observer.report`)."""
    observer = Observer()
    listener = _Listener(observer)
    clock = SimClock()
    kv_feed = FleetKVFeed(clock)
    pods = build_fleet(scenario.fleet, listener, kv_feed, scenario.disaggregation)
    policy = make_policy(policy_name, pods, scenario.seed)
    listener.policy = policy
    events = EventHeap()
    push = events.push
    transfers = None
    if scenario.disaggregation is not None:
        transfers = listener.transfers = Transfers(lambda t, leg: push(t, KV_READ, leg))
    sessions: list[Sessions] = []
    arrivals = generate(
        scenario.workload, scenario.duration_s, scenario.seed, capacity_rps, sessions
    )
    first = next(arrivals, None)
    if first is not None:
        push(first.t, ARRIVAL, first)
    interval = scenario.scrape_interval_ms / 1000
    if policy.needs_scrapes:
        for pod in pods:
            scrape(pod, 0.0)
        push(interval, SCRAPE, None)
    faults = None
    if scenario.faults is not None:
        faults = listener.faults = FaultInjector(scenario.faults, pods)
        for at, down, pod in faults.events(scenario.duration_s):
            push(at, FAULT, (down, pod))
    deadline = scenario.duration_s * DRAIN_FACTOR
    next_progress = 0.0

    drain = getattr(policy, "drain", None)

    def follow_up(request: SimRequest, t: float) -> None:
        """A conversation's next turn, `think_time` after this answer finished."""
        nxt = sessions[0].next_turn(request, t)
        if nxt is not None and nxt.t < scenario.duration_s:
            push(nxt.t, FOLLOW_UP, nxt)

    listener.follow_up = follow_up if sessions else None

    def dispatch(request: SimRequest, pod: SimPod | Split | None, t: float) -> None:
        if pod is DEFERRED:
            return
        if pod is None:
            observer.on_rejected(request.priority)
            if request.session >= 0 and sessions:
                sessions[0].end(request)
            return
        if type(pod) is Split:
            if faults is not None and faults.ledger.continues(request):
                pod = whole(request, pod, t)  # a continuation: no prefill leg (`sim.faults`)
            else:  # its prefill leg first (`disagg`)
                assert transfers is not None, "a P/D pick on a fleet without a split"
                submit(pod.prefill, transfers.start(request, pod, t), t)
                return
        assert isinstance(pod, SimPod)
        hashes = shared_blocks(request)
        engine_request = EngineRequest(
            request.request_id,
            request.prompt_tokens,
            request.output_tokens,
            hashes,
            request.adapter,
            tag=(request, pod),
        )
        submit(pod, engine_request, t)

    def submit(pod: SimPod, engine_request: EngineRequest, t: float) -> None:
        engine = pod.engine
        before = engine.busy_until
        if before is not None and before <= t:
            engine.advance(t)
        engine.submit(engine_request, t)
        wake(pod, before)

    def dispatch_all(items: list[tuple[SimRequest, SimPod | Split | None]], t: float) -> None:
        for request, pod in items:
            # the request's own arrival time stays its arrival: queueing counts in TTFT
            dispatch(request, pod, t)

    def wake(pod: SimPod, before: float | None) -> None:
        busy = pod.engine.busy_until
        if busy is not None and busy != before:
            push(busy, ENGINE, pod)

    def whole(request: SimRequest, split: Split, t: float) -> SimPod:
        """`request` goes on without its prefill leg, whole on its decode pod: the leg
        ends in the policy's bookkeeping as one that failed."""
        ended = getattr(policy, "on_prefill_finished", None)
        if ended is not None:
            ended(request, split.prefill, None, t)
        return split.decode

    def reroute(request: SimRequest, decode: SimPod, t: float) -> None:
        """Its decode pod was lost before the request reached it: routed again."""
        assert faults is not None  # only a fault loses a pod
        faults.rerouted += 1
        policy.on_finished(request, decode, t)
        dispatch(request, policy.route(request, t), t)

    def lose(faults: FaultInjector, pod: SimPod, t: float) -> None:
        """The pod is lost: its streams that had a token go on elsewhere (resume on), its
        prefill legs are served whole by their decode pods, the rest end (`sim.faults`)."""
        continuations, lost, legs = faults.fail(pod, t)
        for sim in [*continuations, *lost]:
            policy.on_finished(sim, pod, t)  # its attempt on the lost pod ended
        for sim in lost:
            if sim.session >= 0 and sessions:
                sessions[0].end(sim)
        for sim in continuations:
            dispatch(sim, policy.route(sim, t), t)
        for leg in legs:
            decode = whole(leg.request, leg.split, t)
            if decode.down:
                reroute(leg.request, decode, t)
            else:
                dispatch(leg.request, decode, t)

    pump = kv_feed.pump
    while events:
        t, kind, payload = events.pop()
        if t > deadline:
            break
        clock.now = t
        pump(t)
        if kind == FOLLOW_UP:
            dispatch(payload, policy.route(payload, t), t)
        elif kind == FAULT:
            assert faults is not None
            down, pod = payload
            if not down:
                faults.recover(pod)
                continue
            lose(faults, pod, t)
        elif kind == KV_READ:
            assert transfers is not None
            leg: PrefillLeg = payload
            if leg.split.decode.down:  # lost during the leg or the transfer
                transfers.let_go(leg)
                reroute(leg.request, leg.split.decode, t)
                continue
            decode_request, decode = transfers.arrived(leg)
            submit(decode, decode_request, t)
        elif kind == ENGINE:
            engine = payload.engine
            if engine.busy_until != t:
                continue  # superseded by a cut segment
            engine.advance(t)
            busy = engine.busy_until
            if busy is not None:  # a step always ends after `t`
                push(busy, ENGINE, payload)
            if drain is not None:
                dispatch_all(drain(t), t)
        elif kind == SCRAPE:
            for pod in pods:
                if not pod.down:  # a lost pod answers no scrape
                    scrape(pod, t)
            if drain is not None:
                dispatch_all(drain(t), t)
            if t < scenario.duration_s or any(not p.engine.idle for p in pods):
                push(t + interval, SCRAPE, None)
        else:
            request: SimRequest = payload
            nxt = next(arrivals, None)
            if nxt is not None:
                push(nxt.t, ARRIVAL, nxt)
            if progress is not None and t >= next_progress:
                progress(t / scenario.duration_s)
                next_progress = t + scenario.duration_s / 50
            dispatch(request, policy.route(request, t), t)
    fleet_usd = sum(p.profile.hourly_usd for p in pods)
    report = observer.report(
        duration_s=scenario.duration_s, fleet_usd_per_hour=fleet_usd, ttft_quantiles=ttft_quantiles
    )
    if transfers is not None:
        report.update(transfers.report())
    if faults is not None:
        report.update(faults.report())
    return report
