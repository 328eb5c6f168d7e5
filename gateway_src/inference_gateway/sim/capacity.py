"""Fleet capacity for a workload: the request rate the fleet sustains at saturation.

Each distinct pod profile is probed once in a closed loop: as many requests shaped like
the workload as its KV cache holds are kept in flight, each finished one replaced at
once, and the completion rate after a warm-up quarter is the pod's capacity. A
scenario's `load` is a fraction of the sum over pods. The same closed loop, at a stated
concurrency, is what the emulator's speed check compares with published serving figures
(`bench/emulator_speed_check.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_gateway.core.request.latency import time_per_output_token
from inference_gateway.emulator.engine import Engine, EngineRequest
from inference_gateway.emulator.profiles import PodProfile
from inference_gateway.sim.pods import pool_profile
from inference_gateway.sim.scenario import PoolSpec, Workload
from inference_gateway.sim.workload import SimRequest, prefix_block_ids, sample_requests

__all__ = ["ClosedLoop", "closed_loop", "fleet_capacity", "pod_capacity"]

PROBE_REQUESTS = 1500


_CACHE: dict[tuple[str, str, int], float] = {}


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """Figures of one pod kept at a fixed number of requests in flight: steady state
    (after the first quarter of completions), or one whole wave (every request sent at
    t = 0, measured to the last finish, as `vllm bench serve --request-rate inf` does)."""

    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float  # prompt + output tokens
    tpot_s: float  # mean time per output token after the first, over measured requests
    concurrency: int


def pod_capacity(pool: PoolSpec, workload: Workload, seed: int) -> float:
    """Saturated requests/s of one pod of `pool` for this workload's request shape."""
    key = (
        pool.model_dump_json(exclude={"name", "replicas", "hourly_usd"}),
        workload.model_dump_json(exclude={"arrival"}),
        seed,
    )
    if key not in _CACHE:
        _CACHE[key] = _probe(pool, workload, seed)
    return _CACHE[key]


def _probe(pool: PoolSpec, workload: Workload, seed: int) -> float:
    """Closed-loop probe: keep the pod as full as its KV cache and `max_num_seqs` allow."""
    profile = pool_profile(pool)
    requests = sample_requests(workload, PROBE_REQUESTS, seed)
    mean_tokens = sum(r.prompt_tokens + r.output_tokens for r in requests) / len(requests)
    concurrency = max(
        1, min(profile.max_num_seqs, int(0.9 * profile.kv_capacity_tokens / mean_tokens))
    )
    adapters = set(pool.adapters) if pool.max_loras else set()
    return closed_loop(profile, requests, concurrency, adapters).requests_per_s


def closed_loop(
    profile: PodProfile,
    requests: list[SimRequest],
    concurrency: int,
    adapters: set[str] | None = None,
    *,
    wave: bool = False,
) -> ClosedLoop:
    """Run `requests` through one engine, `concurrency` at a time, each finished request
    replaced at once (a benchmark client with `--max-concurrency`), and measure the steady
    completion rate, token rates and time per output token; with `wave`, measure every
    request from t = 0 to the last finish instead (a one-shot benchmark's figures, tail
    included)."""
    engine = Engine(profile)
    done: list[EngineRequest] = []

    class _Listener:
        def on_first_token(self, request: EngineRequest, time: float) -> None:
            return None

        def on_finish(self, request: EngineRequest, time: float) -> None:
            done.append(request)

        def on_step(self, time: float) -> None:
            return None

    engine.listener = _Listener()
    served = adapters or set()
    feed = iter(enumerate(requests))

    def submit_next(now: float) -> None:
        item = next(feed, None)
        if item is None:
            return
        i, r = item
        hashes = (
            prefix_block_ids(r.prefix_group, r.prefix_tokens)
            if (r.prefix_group is not None)
            else ()
        )
        adapter = r.adapter if r.adapter in served else None
        engine.submit(EngineRequest(i, r.prompt_tokens, r.output_tokens, hashes, adapter), now)

    for _ in range(concurrency):
        submit_next(0.0)
    seen = 0
    while engine.busy_until is not None:
        now = engine.busy_until
        engine.advance(now)
        for _ in range(len(done) - seen):
            submit_next(now)
        seen = len(done)
    warm = len(done) // 4
    start, end = done[warm].finish_time or 0.0, done[-1].finish_time or 0.0
    measured = done[warm + 1 :]
    if wave:
        start, measured = 0.0, done
    span = max(end - start, 1e-9)
    tpots = [
        tpot
        for r in measured
        if (
            tpot := time_per_output_token(
                r.first_token_time or 0.0, r.finish_time or 0.0, r.output_tokens
            )
        )
        is not None
    ]
    return ClosedLoop(
        requests_per_s=len(measured) / span,
        output_tokens_per_s=sum(r.output_tokens for r in measured) / span,
        total_tokens_per_s=sum(r.prompt_tokens + r.output_tokens for r in measured) / span,
        tpot_s=sum(tpots) / len(tpots) if tpots else 0.0,
        concurrency=concurrency,
    )


def fleet_capacity(pools: list[PoolSpec], workload: Workload, seed: int) -> float:
    return sum(pod_capacity(p, workload, seed) * p.replicas for p in pools)
