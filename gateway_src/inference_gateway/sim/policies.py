"""Routing policies the simulator compares. `gateway` runs the gateway's whole request
path (`gateway.GatewayPolicy`: the director, admission and the scheduler, as `igw
serve` runs them); `upstream-default` runs the real scheduler with the upstream
picker's default profile and nothing else (no admission, no in-flight counts), as a
comparison point; the baselines are a few lines each; `oracle` reads engine state that
no real router can see and is the limit to compare against.

Every policy sees the fleet through `SimPod.endpoint` (scraped metrics) except the
oracle, which reads `SimPod.engine` directly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any, Protocol

from inference_gateway.config.spec import (
    GatewayConfigSpec,
    PluginRef,
    PluginSpec,
    SchedulingProfileSpec,
)
from inference_gateway.core.scheduling import LLMRequest, Scheduler
from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.pd_config import (
    pd_names,
    pd_plugins,
    pd_profiles,
    role_filters,
)
from inference_gateway.errors import ConfigError, NoEndpointError
from inference_gateway.sim.disagg import Split
from inference_gateway.sim.pods import SimPod
from inference_gateway.sim.workload import SimRequest, shared_blocks

__all__ = ["DEFERRED", "POLICIES", "Policy", "make_policy"]

DEFERRED: Any = object()  # route() result: queued in the gateway, dispatched later


class Policy(Protocol):
    name: str
    needs_scrapes: bool

    def route(self, request: SimRequest, now: float) -> SimPod | Split | None: ...
    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None: ...
    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None: ...


def _serves(pod: SimPod, request: SimRequest) -> bool:
    return request.adapter is None or request.adapter in pod.pool.adapters


class _Baseline:
    needs_scrapes = False

    def __init__(self, name: str, pods: list[SimPod], seed: int) -> None:
        self.name = name
        self.pods = pods
        self.random = random.Random(seed)

    def candidates(self, request: SimRequest) -> list[SimPod]:
        """The pods that serve the request and are up (a lost pod refuses connections)."""
        if request.adapter is None and not any(p.down for p in self.pods):
            return self.pods
        return [p for p in self.pods if not p.down and _serves(p, request)]

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        return None

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        return None


class RoundRobin(_Baseline):
    """Kubernetes Service behaviour (kube-proxy round-robins connections; one request per
    connection here)."""

    def __init__(self, name: str, pods: list[SimPod], seed: int) -> None:
        super().__init__(name, pods, seed)
        self._next = 0

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        pods = self.candidates(request)
        if not pods:
            return None
        pod = pods[self._next % len(pods)]
        self._next += 1
        return pod


class RandomPolicy(_Baseline):
    def route(self, request: SimRequest, now: float) -> SimPod | None:
        pods = self.candidates(request)
        return self.random.choice(pods) if pods else None


class LeastOutstanding(_Baseline):
    """Fewest requests this router has in flight at the pod (exact: it is its own count);
    ties broken at random."""

    def __init__(self, name: str, pods: list[SimPod], seed: int) -> None:
        super().__init__(name, pods, seed)
        self.outstanding = [0] * len(pods)

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        out, rnd, pods = self.outstanding, self.random.random, self.candidates(request)
        if not pods:
            return None
        pod = min(pods, key=lambda p: (out[p.index], rnd()))
        out[pod.index] += 1
        return pod

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        self.outstanding[pod.index] -= 1


class Oracle(_Baseline):
    """Clairvoyant: reads each engine's true queue, batch and KV cache and picks the pod
    whose predicted TTFT for this request is lowest."""

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        best, best_t = None, math.inf
        for pod in self.candidates(request):
            t = self.predict(pod, request, now)
            if t < best_t:
                best, best_t = pod, t
        return best

    @staticmethod
    def predict(pod: SimPod, request: SimRequest, now: float) -> float:
        engine = pod.engine
        hashes = shared_blocks(request)
        own = max(1, request.prompt_tokens - 16 * engine.pool.match_prefix(hashes))
        ahead = engine.outstanding_tokens() + own
        n_decode = engine.num_running
        per_step = max(1, engine.profile.max_num_batched_tokens - n_decode)
        steps = math.ceil(ahead / per_step)
        dt = engine.step_time(min(ahead, per_step), 0, n_decode, engine._decode_ctx())
        wait = max(0.0, (engine.busy_until or now) - now)
        blocks_short = -(-request.prompt_tokens // 16) - engine.pool.free
        if blocks_short > 0 or engine.num_running >= engine.profile.max_num_seqs:
            wait += 1.0 + max(0, blocks_short) * 0.01  # must wait for requests to finish
        if request.adapter and request.adapter not in engine._resident:
            wait += engine.profile.lora_load_s
        return wait + steps * dt


def upstream_default_config() -> GatewayConfigSpec:
    """The upstream picker's default profile: queue 2, kv-cache 2, prefix 3."""
    return GatewayConfigSpec(
        plugins=[
            PluginSpec(type="queue-scorer"),
            PluginSpec(type="kv-cache-utilization-scorer"),
            PluginSpec(type="prefix-cache-scorer"),
            PluginSpec(type="max-score-picker"),
        ],
        scheduling_profiles=[
            SchedulingProfileSpec(
                name="default",
                plugins=[
                    PluginRef(plugin_ref="queue-scorer", weight=2),
                    PluginRef(plugin_ref="kv-cache-utilization-scorer", weight=2),
                    PluginRef(plugin_ref="prefix-cache-scorer", weight=3),
                    PluginRef(plugin_ref="max-score-picker"),
                ],
            )
        ],
        default_profile="default",
    )


def approximate_gateway_config() -> GatewayConfigSpec:
    """The gateway as shipped before KV events: the same profiles, with the approximate
    (sent-based) prefix scorer where the precise one stands (the comparison of issue 24)."""
    config = GatewayConfigSpec()
    profiles = [
        p.model_copy(
            update={
                "plugins": [
                    r.model_copy(update={"plugin_ref": "prefix-cache-scorer"})
                    if r.plugin_ref == "precise-prefix-cache-scorer"
                    else r
                    for r in p.plugins
                ]
            }
        )
        for p in config.scheduling_profiles
    ]
    return config.model_copy(update={"scheduling_profiles": profiles})


def pd_gateway_config(non_cached_tokens: int) -> GatewayConfigSpec:
    """The shipped config plus one P/D pool's plugins and profiles, exactly as the
    charts render them (`core.scheduling.pd_config`), its decode profile the default; the decider's
    `nonCachedTokens` the scenario's."""
    names = pd_names()
    aggregated = GatewayConfigSpec().default_profile
    return GatewayConfigSpec(
        plugins=[*role_filters(), *pd_plugins(names, non_cached_tokens, aggregated)],
        scheduling_profiles=pd_profiles(names),
        default_profile=names.decode_profile,
    )


def _gateway_pd(name: str, pods: list[SimPod], seed: int, *, always: bool = False) -> Policy:
    """`gateway-pd`: the gateway with the P/D profiles over the scenario's split, at its
    `non_cached_tokens` (`gateway-pd-always`: 0, every request split)."""
    split = pods[0].split if pods else None
    if pods and split is None:
        raise ConfigError(
            "policies", [f"policies: {name!r} needs the scenario's disaggregation split"]
        )
    threshold = 0 if always or split is None else split.non_cached_tokens
    return _gateway(name, pods, seed, pd_gateway_config(threshold))


class SchedulerPolicy:
    """The scheduler alone on scraped metrics: `upstream-default`'s scoring without the
    gateway's request path around it."""

    needs_scrapes = True

    def __init__(
        self,
        name: str,
        pods: list[SimPod],
        seed: int,
        config: GatewayConfigSpec,
        *,
        count_inflight: bool,
        profile: str | None = None,
    ) -> None:
        self.name = name
        self.pods = pods
        feed = pods[0].kv_feed if pods else None
        kv_index = KVBlockIndex(clock=feed.clock) if feed is not None else None
        self.scheduler = Scheduler(
            config, count_inflight=count_inflight, seed=seed, kv_index=kv_index
        )
        if feed is not None and kv_index is not None and self.scheduler.precise is not None:
            for pod in pods:  # subscribed to every pod's events, as the live picker is
                feed.subscribe(pod.endpoint.name, kv_index)
                kv_index.heard(pod.endpoint.name)
        self.endpoints = [p.endpoint for p in pods]
        self.profile = profile
        self._requests: dict[int, LLMRequest] = {}

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        hashes = shared_blocks(request)
        llm = LLMRequest(
            request_id=str(request.request_id),
            model=request.adapter or self.pods[0].pool.model,
            prompt_tokens=request.prompt_tokens,
            prefix_hashes=hashes,
            kv_hashes=hashes,  # no text here: the engine's block ids are the router's too
            adapter=request.adapter,
            band=request.priority,
            profile=self.profile,
        )
        try:
            endpoint = self.scheduler.schedule(llm, self.endpoints)[0]
        except NoEndpointError:
            return None
        self.scheduler.on_picked(llm, endpoint, now)
        self._requests[request.request_id] = llm
        return self.pods[endpoint.index]

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        llm = self._requests.get(request.request_id)
        if llm is not None:
            self.scheduler.on_first_token(llm, pod.endpoint, ttft, now)

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        llm = self._requests.pop(request.request_id, None)
        if llm is not None:
            self.scheduler.on_finished(llm, pod.endpoint, now)


PolicyFactory = Callable[[str, list[SimPod], int], Policy]


def _gateway(
    name: str,
    pods: list[SimPod],
    seed: int,
    config: GatewayConfigSpec,
    profile: str | None = None,
) -> Policy:
    """The gateway's request path (imported when used: a baseline-only run, such as the
    64-pod speed scenario, does not load the director, the metrics or the transports)."""
    from inference_gateway.sim.gateway import GatewayPolicy

    return GatewayPolicy(name, pods, seed, config, profile=profile)


POLICIES: dict[str, PolicyFactory] = {
    "round-robin": RoundRobin,
    "random": RandomPolicy,
    "least-outstanding": LeastOutstanding,
    "oracle": Oracle,
    "upstream-default": lambda name, pods, seed: SchedulerPolicy(
        name, pods, seed, upstream_default_config(), count_inflight=False
    ),
    "gateway": lambda name, pods, seed: _gateway(name, pods, seed, GatewayConfigSpec()),
    "gateway-approximate": lambda name, pods, seed: _gateway(
        name, pods, seed, approximate_gateway_config()
    ),
    "gateway-pd": _gateway_pd,
    "gateway-pd-always": lambda name, pods, seed: _gateway_pd(name, pods, seed, always=True),
}


def _register_peers() -> None:
    """The peer routers of DESIGN §5 (see `peers`)."""
    from inference_gateway.sim.peers import DynamoKV, ProductionStackPrefixAware, SGLangCacheAware

    POLICIES["production-stack-prefixaware"] = ProductionStackPrefixAware
    POLICIES["sglang-cache-aware"] = SGLangCacheAware
    POLICIES["dynamo-kv"] = DynamoKV


_register_peers()


def make_policy(name: str, pods: list[SimPod], seed: int) -> Policy:
    """`gateway:PROFILE` selects a named profile of the default gateway config;
    `POLICY@N` runs N replicas of a policy, each with its own view, sharing their
    dispatch counts through the store as shipped; `POLICY@N-unshared` runs them without
    (see `replicas`)."""
    from inference_gateway.sim.replicas import Replicated, parse_replicas

    replicated = parse_replicas(name)
    if replicated is not None:
        base_name, count, sharing = replicated
        make_policy(base_name, [], seed)  # fail on a bad base name now
        return Replicated(
            name, pods, seed, base=base_name, count=count, make=make_policy, sharing=sharing
        )
    base, _, profile = name.partition(":")
    if base == "gateway" and profile:
        config = GatewayConfigSpec()
        if profile not in {p.name for p in config.scheduling_profiles}:
            raise ConfigError("policies", [f"policies: unknown gateway profile {profile!r}"])
        return _gateway(name, pods, seed, config, profile=profile)
    factory = POLICIES.get(base)
    if factory is None:
        raise ConfigError(
            "policies", [f"policies: unknown policy {name!r} (known: {sorted(POLICIES)})"]
        )
    return factory(name, pods, seed)
