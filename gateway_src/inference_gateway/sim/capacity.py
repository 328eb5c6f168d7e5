"""Fleet capacity for a workload: the request rate the fleet sustains at saturation.

Each distinct pod profile is probed once in a closed loop: as many requests shaped like
the workload as its KV cache holds are kept in flight, each finished one replaced at
once, and the completion rate after a warm-up quarter is the pod's capacity. A
scenario's `load` is a fraction of the sum over pods.
"""

from __future__ import annotations

from ..emulator.engine import Engine, EngineRequest
from .fleet import pool_profile
from .scenario import PoolSpec, Workload
from .workload import prefix_block_ids, sample_requests

__all__ = ["fleet_capacity", "pod_capacity"]

PROBE_REQUESTS = 1500


_CACHE: dict[tuple[str, str, int], float] = {}


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
    """Closed-loop probe: keep the pod as full as its KV cache and `max_num_seqs` allow,
    replacing each finished request at once, and measure the steady completion rate."""
    profile = pool_profile(pool)
    engine = Engine(profile)
    requests = sample_requests(workload, PROBE_REQUESTS, seed)
    finished: list[float] = []

    class _Listener:
        def on_first_token(self, request: EngineRequest, time: float) -> None:
            return None

        def on_finish(self, request: EngineRequest, time: float) -> None:
            finished.append(time)

        def on_step(self, time: float) -> None:
            return None

    engine.listener = _Listener()
    mean_tokens = sum(r.prompt_tokens + r.output_tokens for r in requests) / len(requests)
    concurrency = max(
        1, min(profile.max_num_seqs, int(0.9 * profile.kv_capacity_tokens / mean_tokens))
    )
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
        adapter = r.adapter if r.adapter in pool.adapters and pool.max_loras else None
        engine.submit(EngineRequest(i, r.prompt_tokens, r.output_tokens, hashes, adapter), now)

    for _ in range(concurrency):
        submit_next(0.0)
    seen = 0
    while engine.busy_until is not None:
        now = engine.busy_until
        engine.advance(now)
        for _ in range(len(finished) - seen):
            submit_next(now)
        seen = len(finished)
    warm = len(finished) // 4
    return (len(finished) - 1 - warm) / max(finished[-1] - finished[warm], 1e-9)


def fleet_capacity(pools: list[PoolSpec], workload: Workload, seed: int) -> float:
    return sum(pod_capacity(p, workload, seed) * p.replicas for p in pools)
