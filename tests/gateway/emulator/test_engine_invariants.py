"""Engine invariants (issue 2, "Must hold"), on a virtual clock stepped one commit at a time."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable

import pytest

from inference_gateway.emulator.engine import Engine, EngineRequest
from inference_gateway.emulator.kvcache import BlockPool
from inference_gateway.emulator.profiles import BLOCK_SIZE, PodProfile, pod_profile


class Recorder:
    """Counts listener calls per request, to prove each request starts and ends once."""

    def __init__(self) -> None:
        self.first: Counter[int] = Counter()
        self.finished: Counter[int] = Counter()
        self.steps = 0

    def on_first_token(self, request: EngineRequest, time: float) -> None:
        self.first[request.request_id] += 1

    def on_step(self, time: float) -> None:
        self.steps += 1

    def on_finish(self, request: EngineRequest, time: float) -> None:
        self.finished[request.request_id] += 1


def run(
    profile: PodProfile,
    arrivals: Iterable[tuple[float, EngineRequest]],
    *,
    check: Callable[[Engine], None] | None = None,
    recorder: Recorder | None = None,
) -> Engine:
    """Drive an engine in virtual time, committing one step at a time, `check` after each."""
    engine = Engine(profile, listener=recorder or Recorder(), report_progress=True)

    def until(t: float | None) -> None:
        while engine.busy_until is not None and (t is None or engine.busy_until <= t):
            engine.advance(engine.busy_until)
            if check:
                check(engine)

    for t, request in sorted(arrivals, key=lambda a: a[0]):
        until(t)
        engine.submit(request, t)
        if check:
            check(engine)
    until(None)
    return engine


def request(i: int, prompt: int, output: int, **kw: object) -> EngineRequest:
    return EngineRequest(request_id=i, prompt_tokens=prompt, output_tokens=output, **kw)  # type: ignore[arg-type]


def ttft(r: EngineRequest) -> float:
    assert r.first_token_time is not None
    return r.first_token_time - r.arrival


H100 = pod_profile("H100", "llama-3.1-8b")
A10G = pod_profile("A10G", "llama-3.1-8b")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kv_never_exceeds_capacity_and_every_request_finishes_once(seed: int) -> None:
    """Heavy random load on a small pool (~360 blocks): preemption must happen, safely."""
    rng = random.Random(seed)
    profile = pod_profile("H100", "llama-3.1-8b", gpu_memory_utilization=0.26, max_loras=2)
    capacity = profile.kv_capacity_tokens
    prefixes = [[("p", g, b) for b in range(rng.randint(5, 40))] for g in range(4)]
    arrivals = []
    for i in range(300):
        prompt = rng.randint(20, 1200)
        output = rng.randint(1, min(400, capacity - prompt))
        hashes: list[object] = []
        if rng.random() < 0.5:
            hashes = list(rng.choice(prefixes))[: prompt // BLOCK_SIZE]
        hashes += [("u", i, b) for b in range(len(hashes), prompt // BLOCK_SIZE)]
        adapter = rng.choice([None, None, "a", "b", "c"])
        arrivals.append(
            (rng.uniform(0, 3.0), request(i, prompt, output, block_hashes=hashes, adapter=adapter))
        )
    peak = 0.0

    def check(engine: Engine) -> None:
        nonlocal peak
        assert 0 <= engine.pool.used <= engine.pool.num_blocks
        snap = engine.snapshot()
        assert 0.0 <= snap.kv_usage <= 1.0
        assert len(snap.running_adapters) <= 2
        peak = max(peak, snap.kv_usage)

    recorder = Recorder()
    engine = run(profile, arrivals, check=check, recorder=recorder)
    requests = [r for _, r in arrivals]
    assert sum(r.preemptions for r in requests) > 0, "load too light to exercise preemption"
    assert peak > 0.9
    assert engine.completed == len(requests)
    assert set(recorder.finished.values()) == {1} and len(recorder.finished) == len(requests)
    assert set(recorder.first.values()) == {1} and len(recorder.first) == len(requests)
    for r in requests:
        assert r.finish_time is not None and r.first_token_time is not None
        assert r.arrival <= r.first_token_time <= r.finish_time
        assert r.generated(engine.clock) == r.output_tokens
    assert engine.idle and engine.num_running == 0 and not engine.waiting
    assert engine.pool.used == 0


def test_prefix_hit_cuts_prefill_time() -> None:
    shared = [("system", b) for b in range(100)]  # 1,600 tokens
    first = request(1, 1700, 1, block_hashes=[*shared, ("q", 1)])
    second = request(2, 1700, 1, block_hashes=[*shared, ("q", 2)])
    cold = request(3, 1700, 1, block_hashes=[("other", b) for b in range(101)])
    engine = run(H100, [(0.0, first), (1.0, second), (2.0, cold)])
    assert second.cached_tokens == 1600
    assert ttft(second) < 0.3 * ttft(cold)
    assert ttft(first) == pytest.approx(ttft(cold))
    assert engine.prefix_hits == 1600
    assert engine.prefix_queries == 3 * 1700


def test_a_cached_context_is_evicted_from_its_tail_so_its_head_still_hits() -> None:
    """vLLM frees a finished request's blocks in reverse ("Free blocks in reverse order
    so that the tail blocks are freed first", `SingleTypeKVCacheManager.free`,
    vllm-project/vllm `vllm/v1/core/single_type_kv_cache_manager.py`) onto a free queue
    that evicts from its front (`FreeKVCacheBlockQueue`, `vllm/v1/core/kv_cache_utils.py`:
    of blocks freed together, the chain's tail goes first). A pool short of room
    therefore trims a cached context from its end, and a later request still hits the
    rest; evicting the head first would leave nothing to match (the emulator did, until
    the `kv-pressure` scenario showed whole contexts lost to one eviction)."""
    pool = BlockPool(6)
    pool.acquire([1, 2, 3, 4], 0)
    pool.release([1, 2, 3, 4], 0)
    pool.acquire([9, 10], 1)  # three blocks, two free: one cached block goes
    assert pool.match_prefix([1, 2, 3, 4]) == 3
    pool.acquire([11], 1)  # two more: the next from the tail
    assert pool.match_prefix([1, 2, 3, 4]) == 1


def test_adapter_swap_costs_its_load_time() -> None:
    profile = pod_profile("H100", "llama-3.1-8b", max_loras=1)
    base = request(0, 200, 1)
    a1, a2 = request(1, 200, 1, adapter="a"), request(2, 200, 1, adapter="a")
    b1 = request(3, 200, 1, adapter="b")
    run(profile, [(0.0, base), (1.0, a1), (2.0, a2), (3.0, b1)])
    assert ttft(a1) == pytest.approx(ttft(base) + profile.lora_load_s)
    assert ttft(a2) == pytest.approx(ttft(base))  # resident: no load
    assert ttft(b1) == pytest.approx(ttft(base) + profile.lora_load_s)  # swapped a out


def test_adapter_waits_for_a_slot_while_others_go_ahead() -> None:
    profile = pod_profile("H100", "llama-3.1-8b", max_loras=1)
    long_a = request(1, 100, 500, adapter="a")
    b = request(2, 100, 5, adapter="b")
    plain = request(3, 100, 5)
    engine = run(profile, [(0.0, long_a), (0.01, b), (0.011, plain)])
    assert plain.finish_time is not None and b.first_token_time is not None
    assert plain.finish_time < b.first_token_time  # b waited; plain went ahead
    assert long_a.finish_time is not None
    assert b.first_token_time >= long_a.finish_time
    assert engine.completed == 3


def _makespan(profile: PodProfile, prompt: int, output: int, n: int) -> float:
    requests = [request(i, prompt, output) for i in range(n)]
    run(profile, [(0.0, r) for r in requests])
    return max(r.finish_time or 0.0 for r in requests)


def test_a10g_slower_than_h100_by_the_profiles_ratio() -> None:
    """Decode-bound load follows the bandwidth ratio, prefill-bound load the FLOPs ratio."""

    def weights_read(p: PodProfile) -> float:
        g = p.gpu
        return g.step_overhead_ms / 1e3 + p.model.weight_gib * 2**30 / (
            g.bandwidth_gbs * 1e9 * g.bandwidth_efficiency
        )

    def prefill_rate(p: PodProfile) -> float:
        return p.gpu.dense_bf16_tflops * p.gpu.mfu_prefill

    decode = _makespan(A10G, 16, 300, 8) / _makespan(H100, 16, 300, 8)
    assert decode == pytest.approx(weights_read(A10G) / weights_read(H100), rel=0.15)
    prefill = _makespan(A10G, 1500, 1, 1) / _makespan(H100, 1500, 1, 1)
    assert prefill == pytest.approx(prefill_rate(H100) / prefill_rate(A10G), rel=0.15)
    assert decode > 3 and prefill > 10


def test_throughput_grows_with_batch_until_compute_bound() -> None:
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    throughput = [n * 128 / _makespan(H100, 16, 128, n) for n in sizes]
    for smaller, larger in itertools.pairwise(throughput):
        assert larger >= smaller * 0.99
    assert throughput[1] / throughput[0] > 1.8  # memory-bound: batching is nearly free
    assert throughput[-1] / throughput[-2] < 1.2  # compute-bound: it no longer helps
    # and the step really is compute-bound at the top: FLOPs time exceeds bytes time
    engine = Engine(H100)
    compute = engine.step_time(0, 0, 1024, 0.0) - H100.gpu.step_overhead_ms / 1e3
    assert compute > engine._t_weights


def test_batch_bounded_by_max_num_seqs() -> None:
    profile = pod_profile("H100", "llama-3.1-8b", max_num_seqs=4)
    seen = 0

    def check(engine: Engine) -> None:
        nonlocal seen
        assert engine.num_running <= 4
        seen = max(seen, engine.num_running)

    run(profile, [(0.0, request(i, 50, 20)) for i in range(10)], check=check)
    assert seen == 4


def test_arrival_cuts_a_decode_segment() -> None:
    """A request arriving mid-segment starts prefill at the next step, not the segment end."""
    long_run = request(1, 16, 2000)
    late = request(2, 16, 1)
    run(H100, [(0.0, long_run), (0.5, late)])
    assert ttft(late) < 0.05


@pytest.mark.parametrize("segment_s", [None, 0.02])
def test_decode_booking_neither_blocks_admission_nor_shows_as_kv_use(
    segment_s: float | None,
) -> None:
    """Regression: blocks booked ahead for a decode segment used to stay held.

    Twenty long decodes on an A10G booked ~1,650 of 1,907 blocks while using 140, so
    `/metrics` showed 86% KV use and a long prompt that fits waited ~45 s for them to end.
    """
    profile = A10G
    decoders = [request(i, 100, 1200) for i in range(20)]
    engine = Engine(profile, max_segment_s=segment_s)
    for r in decoders:
        engine.submit(r, 0.0)
    while engine.num_running < 20 or engine.prefilling:
        assert engine.busy_until is not None
        engine.advance(engine.busy_until)
    in_use = sum(-(-(r.prompt_tokens + r.generated(engine.clock)) // BLOCK_SIZE) for r in decoders)
    reported = engine.snapshot().kv_usage * profile.num_gpu_blocks
    assert in_use - 10 <= reported <= in_use + 20
    late = request(100, 8000, 1)  # 500 blocks: fits beside the decodes
    engine.advance(5.0)
    engine.submit(late, 5.0)
    while late.first_token_time is None:
        assert engine.busy_until is not None
        engine.advance(engine.busy_until)
    alone = _makespan(profile, 8000, 1, 1)
    assert ttft(late) < alone * 1.3


@pytest.mark.parametrize("seed", range(12))
def test_random_configurations_keep_every_invariant(seed: int) -> None:
    """Small pools, tiny budgets, LoRA, shared prefixes, capped segments: all combined."""
    rng = random.Random(100 + seed)
    profile = pod_profile(
        "H100",
        "llama-3.1-8b",
        gpu_memory_utilization=rng.choice([0.255, 0.26, 0.3]),
        max_loras=(max_loras := rng.choice([0, 1, 2])),
        max_num_seqs=rng.choice([None, 4, 32]),
        max_num_batched_tokens=rng.choice([None, 64, 512]),
    )
    capacity = profile.kv_capacity_tokens
    prefixes = [[("p", g, b) for b in range(rng.randint(1, 60))] for g in range(3)]
    arrivals = []
    for i in range(rng.randint(20, 120)):
        prompt = rng.randint(1, min(3000, capacity - 1))
        hashes: list[object] = []
        if rng.random() < 0.6:
            hashes = list(rng.choice(prefixes))[: prompt // BLOCK_SIZE]
        hashes += [("u", i, b) for b in range(len(hashes), prompt // BLOCK_SIZE)]
        arrivals.append(
            (
                rng.uniform(0, rng.choice([0.01, 1.0, 5.0])),
                request(
                    i,
                    prompt,
                    rng.randint(1, max(1, min(600, capacity - prompt))),
                    block_hashes=hashes,
                    adapter=rng.choice([None, "a", "b", "c"]) if max_loras else None,
                ),
            )
        )
    recorder = Recorder()
    engine = Engine(
        profile, listener=recorder, report_progress=True, max_segment_s=rng.choice([None, 0.02])
    )

    def step_until(t: float | None) -> None:
        while engine.busy_until is not None and (t is None or engine.busy_until <= t):
            engine.advance(engine.busy_until)
            assert 0 <= engine.pool.used <= engine.pool.num_blocks
            assert 0 <= engine.kv_usage <= engine.pool.usage

    for t, r in sorted(arrivals, key=lambda a: a[0]):
        step_until(t)
        engine.submit(r, t)
    step_until(None)
    assert engine.completed == len(arrivals) == len(recorder.finished)
    assert set(recorder.finished.values()) == {1}
    assert engine.pool.used == 0
    for _, r in arrivals:
        assert r.first_token_time is not None and r.finish_time is not None
        assert r.arrival <= r.first_token_time <= r.finish_time


@pytest.mark.parametrize("seed", [4, 5])
def test_aborts_anywhere_free_everything_and_end_each_request_once(seed: int) -> None:
    """Aborting requests while they wait, prefill or decode (vLLM's abort on a client
    disconnect) leaves the pool consistent: blocks never over- or under-counted, every
    request ends exactly once, and an idle engine holds no block."""
    rng = random.Random(seed)
    profile = pod_profile("H100", "llama-3.1-8b", gpu_memory_utilization=0.26, max_loras=2)
    recorder = Recorder()
    engine = Engine(profile, listener=recorder, report_progress=True)
    requests = [
        request(
            i,
            rng.randint(20, 1500),
            rng.randint(1, 300),
            block_hashes=[("u", i, b) for b in range(3)],
            adapter=rng.choice([None, "a", "b"]),
        )
        for i in range(200)
    ]
    now, aborted = 0.0, 0
    for r in requests:
        now += rng.uniform(0, 0.01)
        engine.advance(now)
        engine.submit(r, now)
        for victim in rng.choices(requests[: r.request_id + 1], k=2):
            if rng.random() < 0.15 and engine.abort(victim, now):
                aborted += 1
        assert 0 <= engine.pool.used <= engine.pool.num_blocks
    while engine.busy_until is not None:
        engine.advance(engine.busy_until)
    assert aborted > 10
    assert set(recorder.finished.values()) == {1} and len(recorder.finished) == len(requests)
    assert engine.idle and engine.num_running == 0 and not engine.waiting
    assert engine.pool.used == 0
    assert not engine.abort(requests[0], now)  # an ended request cannot end again
