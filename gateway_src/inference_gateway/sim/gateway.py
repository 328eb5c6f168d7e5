"""The `gateway` policies: the gateway's own request path, on the simulator's clock.

A simulated request goes through the same core that `igw serve` and `igw picker` build
(`assembly.core.build_core`: the endpoint store, the scheduler, the director), over the
simulated pods' endpoints: rewrites, model routing, the priority band (its workload
band is its InferenceObjective, sent in the objective header), token limits, admission
(`PoolGate`: the same saturation, in-transit and queueing rules), ranking by the real
`Scheduler`, and a `RequestLifecycle` whose reports (`picked`, `first_byte`, `finished`)
do the scheduler's and the gate's bookkeeping. Only the driver differs: the director's
clock is the virtual one, a queued request's wait is a handle the gate resolves instead
of a future, and the gate's ticker is the driver's `drain` after every engine step and
scrape. What the real path reads from a body (the model, a token estimate, the prompt's
prefix hashes) comes from the workload instead (`Intake`): exact token counts and the
shared-prefix block ids the engine caches by.

The simulated fleet is one pool-less gateway: the config's `models`, `pools` and rate
limits describe a real cluster's pools and clients, which a scenario does not have, so
the pods route by the models they serve (as `igw serve --endpoints FILE` does) and the
workload, one anonymous client, is not rate limited.
"""

from __future__ import annotations

from typing import Any

from inference_gateway.assembly.core import build_core
from inference_gateway.config.spec import GatewayConfigSpec, ObjectiveSpec
from inference_gateway.core.request.body import OutputBound
from inference_gateway.core.request.director import (
    OBJECTIVE_HEADER,
    PROFILE_HEADER,
    Intake,
    Pending,
    Rejection,
)
from inference_gateway.core.request.lifecycle import RequestLifecycle
from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.traffic.flow_control import BANDS, FlowController
from inference_gateway.core.traffic.objectives import band_of_priority
from inference_gateway.core.traffic.routing import Route
from inference_gateway.sim.disagg import Split
from inference_gateway.sim.pods import SimPod
from inference_gateway.sim.policies import DEFERRED
from inference_gateway.sim.workload import SimRequest, shared_blocks

__all__ = ["GatewayPolicy", "simulated_config"]

# the workload's bands as InferenceObjectives (priority → band, see traffic.objectives)
BAND_OBJECTIVES = [
    ObjectiveSpec(name=band, priority=p) for band, p in zip(BANDS, (1, 0, -1), strict=True)
]
assert [band_of_priority(o.priority) for o in BAND_OBJECTIVES] == list(BANDS)
ANY_POOL = Route("", None, None, None)  # the gate of a pool-less gateway


def simulated_config(config: GatewayConfigSpec) -> GatewayConfigSpec:
    """`config` as the simulated gateway runs it (see the module docstring): scheduling,
    flow control and objectives kept, the workload's bands as objectives first."""
    return config.model_copy(
        update={
            "models": [],
            "pools": [],
            "rate_limits": [],
            "objectives": BAND_OBJECTIVES + list(config.objectives),
        }
    )


class VirtualClock:
    """The director's clock: the simulated time of the event being handled."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Wait:
    """A queued request's handle: the gate resolves it as it would a future, and the
    request resumes at once (its pick is counted before anything else happens, as a
    resumed handler picks before it next yields); the driver sends it to its pod at
    its next `drain`, at the same virtual time."""

    __slots__ = ("pending", "policy", "request", "result")

    def __init__(self, policy: GatewayPolicy, request: SimRequest, pending: Pending) -> None:
        self.policy = policy
        self.request = request
        self.pending = pending
        self.result: bool | None = None

    def done(self) -> bool:
        return self.result is not None

    def set_result(self, admitted: bool) -> None:
        self.result = admitted
        self.policy._resume(self)


class GatewayPolicy:
    """The gateway as a simulator policy (`gateway`, `gateway:PROFILE`, a tuned config)."""

    needs_scrapes = True

    def __init__(
        self,
        name: str,
        pods: list[SimPod],
        seed: int,
        config: GatewayConfigSpec,
        *,
        profile: str | None = None,
    ) -> None:
        self.name = name
        self.pods = pods
        self.clock = VirtualClock()
        self._resumed: list[tuple[SimRequest, SimPod | Split | None]] = []
        self._soon: list[Any] = []
        # the pods' KV events on the virtual clock, as the live picker subscribes to them
        feed = pods[0].kv_feed if pods else None
        kv_index = KVBlockIndex(clock=feed.clock) if feed is not None else None
        self.core = build_core(
            [p.endpoint for p in pods],
            simulated_config(config),
            scrape=False,  # the driver scrapes the pods (`pods.scrape`)
            seed=seed,
            timed=False,
            clock=self.clock,
            soon=self._soon.append,
            max_lifetime_s=None,
            kv_index=kv_index,
        )
        precise = getattr(self.core.director.scheduler, "precise", None)
        if feed is not None and kv_index is not None and precise is not None:
            for pod in pods:
                feed.subscribe(pod.endpoint.name, kv_index)
                kv_index.heard(pod.endpoint.name)
        self.director = self.core.director
        self.endpoints = self.core.store.endpoints
        self.controller: FlowController = self.director.gate(ANY_POOL).controller
        self._headers = {
            band: {OBJECTIVE_HEADER: band, **({PROFILE_HEADER: profile} if profile else {})}
            for band in BANDS
        }
        self._model = pods[0].pool.model if pods else ""
        self._lives: dict[int, RequestLifecycle] = {}

    def route(self, request: SimRequest, now: float) -> Any:
        """A pod, `DEFERRED` (queued by admission) or None (refused)."""
        # the engine's block ids are the router's too (no text here): shared prefixes and
        # the conversation so far
        hashes = tuple(shared_blocks(request))
        intake = Intake(
            request.adapter or self._model,
            request.prompt_tokens,
            OutputBound(request.output_tokens, True),
            lambda _model: hashes,
            kv_hashes=hashes,
        )
        return self.submit(request, intake, now)

    def submit(self, request: SimRequest, intake: Intake, now: float) -> Any:
        """`route` for a request already read (`Intake`): a body's, in the test that
        replays one trace through this policy and through `igw serve`."""
        self.clock.now = now
        headers = self._headers.get(request.priority) or self._headers["standard"]
        director = self.director
        try:
            pending = director.begin(intake, headers)
            if not director.offer(pending):
                assert pending.waiter is not None
                pending.waiter.handle = _Wait(self, request, pending)
                return DEFERRED
            return self._start(request, pending)
        except Rejection:
            return None

    def _start(self, request: SimRequest, pending: Pending) -> SimPod | Split | None:
        """The director's decision, reported picked; with a prefill pod in it (a P/D
        config, `Decision.prefill`) a `Split` the driver runs as two legs."""
        try:
            life = self.director.start(pending)
        except Rejection:
            return None
        decision = life.decision
        endpoint = decision.ranked[0]
        life.picked(endpoint)
        self._lives[request.request_id] = life
        if decision.prefill:
            prefill = decision.prefill[0]
            life.prefill_picked(prefill)
            return Split(self.pods[endpoint.index], self.pods[prefill.index])
        return self.pods[endpoint.index]

    def drain(self, now: float) -> list[tuple[SimRequest, SimPod | Split | None]]:
        """The gate's round (its ticker) and the rounds resumed picks ask for, then every
        request whose wait ended since the last drain: with a pod, or None when its
        band's TTL passed."""
        self.clock.now = now
        for gate in self.director.gates.values():
            gate.pump()
        while self._soon:
            soon = self._soon[:]
            self._soon.clear()
            for call in soon:
                call()
        out = self._resumed[:]
        self._resumed.clear()
        return out

    def _resume(self, wait: _Wait) -> None:
        try:
            self.director.resume(wait.pending, bool(wait.result))
            pod = self._start(wait.request, wait.pending)
        except Rejection:
            pod = None
        self._resumed.append((wait.request, pod))

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        life = self._lives.get(request.request_id)
        if life is not None:
            self.clock.now = now
            life.first_byte()

    def on_prefill_finished(
        self, request: SimRequest, pod: SimPod, ttft: float | None, now: float
    ) -> None:
        """A `Split`'s prefill leg answered (its one token: its TTFT on the prefill pod),
        or never will (None: its pod was lost, or the request goes on whole)."""
        life = self._lives.get(request.request_id)
        if life is not None:
            self.clock.now = now
            life.prefill_ended(ttft)

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        life = self._lives.pop(request.request_id, None)
        if life is not None:
            self.clock.now = now
            life.finished()
