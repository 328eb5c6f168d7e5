"""Simulated pods: one engine each, and the `Endpoint` through which routers see it."""

from __future__ import annotations

from dataclasses import dataclass

from inference_gateway.core.scheduling.pd import ROLE_LABEL
from inference_gateway.core.scheduling.types import Endpoint, PodMetrics
from inference_gateway.emulator.engine import Engine, EngineListener
from inference_gateway.emulator.profiles import PodProfile, pod_profile
from inference_gateway.sim.kv_feed import FleetKVFeed
from inference_gateway.sim.scenario import Disaggregation, PoolSpec

__all__ = ["SimPod", "build_fleet", "pool_profile", "scrape"]


@dataclass(slots=True)
class SimPod:
    index: int
    pool: PoolSpec
    profile: PodProfile
    engine: Engine
    endpoint: Endpoint
    kv_feed: FleetKVFeed | None = None  # the pods' KV events, for subscribing pickers
    # the scenario's P/D split (the same object on every pod; None: no split)
    split: Disaggregation | None = None
    down: bool = False  # lost (`sim.faults`): no scrape answers, no router picks it


def pool_profile(pool: PoolSpec) -> PodProfile:
    return pod_profile(
        pool.gpu, pool.model, tp=pool.tp, max_loras=pool.max_loras, hourly_usd=pool.hourly_usd
    )


def build_fleet(
    pools: list[PoolSpec],
    listener: EngineListener,
    kv_feed: FleetKVFeed | None = None,
    split: Disaggregation | None = None,
) -> list[SimPod]:
    """One pod per replica; under a P/D `split` the first `split.prefill[pool]` pods of a
    named pool are labelled prefill and its others decode (`ROLE_LABEL`), whatever the
    policy: a config without the role filters serves every pod whole."""
    pods: list[SimPod] = []
    for pool in pools:
        profile = pool_profile(pool)
        models = frozenset([pool.model, *pool.adapters])
        prefillers = split.prefill.get(pool.name) if split is not None else None
        for replica in range(pool.replicas):
            i = len(pods)
            roles = (
                {ROLE_LABEL: "prefill" if replica < prefillers else "decode"}
                if prefillers is not None
                else {}
            )
            endpoint = Endpoint(
                name=f"{pool.name}-{replica}",
                address=f"sim-{i}",
                port=8000,
                pool=pool.name,
                labels={
                    "igw.dev/gpu": pool.gpu,
                    "igw.dev/pool": pool.name,
                    "igw.dev/model": pool.model,  # so a request for an adapter routes as one
                    **roles,
                },
                models=models,
                index=i,
            )
            sink = kv_feed.sink(endpoint.name) if kv_feed is not None else None
            engine = Engine(profile, listener=listener, kv_sink=sink)
            pods.append(SimPod(i, pool, profile, engine, endpoint, kv_feed, split))
    return pods


def scrape(pod: SimPod, now: float) -> None:
    """What a metrics scrape of the pod returns, stored on its endpoint.

    Equivalent to rendering `/metrics` and parsing it back (a test proves the two agree),
    without the text round trip, which would dominate a long simulation.
    """
    engine = pod.engine
    adapters_running = engine._adapters_running
    adapters_waiting = engine._adapters_waiting
    metrics = PodMetrics(
        waiting=len(engine.waiting),
        running=engine.num_running,
        kv_usage=engine.kv_usage,
        running_adapters=frozenset(a for a, n in adapters_running.items() if n)
        if adapters_running
        else frozenset(),
        waiting_adapters=frozenset(a for a, n in adapters_waiting.items() if n)
        if adapters_waiting
        else frozenset(),
        max_loras=pod.profile.max_loras,
        block_size=16,
        num_gpu_blocks=pod.profile.num_gpu_blocks,
    )
    pod.endpoint.record_scrape(metrics, now)
