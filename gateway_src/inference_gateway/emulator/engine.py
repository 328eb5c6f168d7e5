"""A vLLM-faithful engine model: what a router can see of one model-server pod.

The engine follows vLLM V1's scheduler where routing can observe it:

* continuous batching: each step serves every running request one decode token, then
  spends the rest of the `max_num_batched_tokens` budget on prefill chunks (chunked
  prefill), admitting waiting requests first-come first-served while `max_num_seqs`,
  KV blocks and LoRA slots allow;
* a KV block pool (`kvcache.BlockPool`) with prefix caching; when blocks run out during
  decode, the newest request is preempted and recomputed later, as vLLM does;
* LoRA: `max_loras` resident slots; loading an adapter lengthens the step by its load
  time; a request whose adapter cannot get a slot waits while others go ahead;
* step time from a roofline: `overhead + max(bytes / (bandwidth × efficiency),
  prefill FLOPs / (peak × mfu_prefill) + decode FLOPs / (peak × mfu_decode))`, plus
  all-reduce time under tensor parallelism (latency and bytes over the instance's
  interconnect) and adapter load time; a pod is one TP group, and a mixture of experts
  computes with its active parameters and reads the experts its tokens route to.

Speed matters (a 64-pod fleet for a simulated hour), so decode-only stretches run as one
*segment* of k identical steps instead of k events: a per-engine decode clock counts
steps, each decoding request stores the clock value at which it finishes (a heap), and
the sums the step time needs are kept incrementally. A segment ends at the next finish,
when KV blocks would run out, at `max_segment_s`, or early (at the next step boundary)
when a request arrives. KV blocks for decode are booked conservatively (one partial
block per request) for the segment ahead, so KV use never exceeds capacity; a booking
left over when a segment is cut is handed back at the next step, and `kv_usage` (what
`/metrics` reports) leaves booked-but-unwritten blocks out, as vLLM allocates lazily.

The engine is driven from outside: `submit()` a request, and call `advance(now)` when
`busy_until` has passed. The virtual-time simulator and the real-time HTTP server are
two such drivers.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from inference_gateway.emulator.kvcache import BlockPool, KVEventSink
from inference_gateway.emulator.profiles import BLOCK_SIZE, PodProfile

__all__ = ["Engine", "EngineListener", "EngineRequest", "EngineSnapshot"]


class EngineListener(Protocol):
    def on_first_token(self, request: EngineRequest, time: float) -> None: ...
    def on_step(self, time: float) -> None: ...
    def on_finish(self, request: EngineRequest, time: float) -> None: ...


@dataclass(slots=True, eq=False)
class EngineRequest:
    """A request as the engine sees it. `block_hashes` are its full prompt blocks' hashes."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    block_hashes: Sequence[Hashable] = ()
    adapter: str | None = None
    arrival: float = 0.0
    tag: Any = None  # the driver's own handle (a stream, a sim record)
    # progress
    cached_tokens: int = 0
    first_token_time: float | None = None
    finish_time: float | None = None
    preemptions: int = 0
    _target: int = 0  # prompt tokens to compute before the first token
    _computed: int = 0
    _held_hashes: Sequence[Hashable] = ()
    _prompt_blocks: int = 0
    _seq: int = 0  # admission order, for preempting the newest
    _decode_base: int = 0  # tokens generated = clock − _decode_base while decoding
    _finish_clock: int = 0
    _epoch: int = 0  # bumped on preemption, so stale heap entries are skipped
    _generated_before: int = 0  # tokens generated before a preemption

    def generated(self, clock: int) -> int:
        """Output tokens produced so far, given the engine's decode clock."""
        if self.finish_time is not None:
            return self.output_tokens
        if self._finish_clock:
            return clock - self._decode_base
        return self._generated_before


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """What `/metrics` shows: the router's whole view of the pod."""

    num_waiting: int
    num_running: int
    kv_usage: float
    running_adapters: tuple[str, ...]
    waiting_adapters: tuple[str, ...]
    max_loras: int
    num_gpu_blocks: int
    block_size: int
    prefix_cache_queries: int
    prefix_cache_hits: int


_NO_CHUNKS: list[tuple[EngineRequest, int]] = []  # shared by decode-only segments, never mutated


@dataclass(slots=True)
class _Step:
    start: float
    dt: float
    steps: int  # > 1 only for decode-only segments
    chunks: list[tuple[EngineRequest, int]] = field(default_factory=list)


class Engine:
    def __init__(
        self,
        profile: PodProfile,
        *,
        listener: EngineListener | None = None,
        prefix_caching: bool = True,
        max_segment_s: float | None = None,
        report_progress: bool = False,
        kv_sink: KVEventSink | None = None,
    ) -> None:
        self.profile = profile
        self.listener = listener
        self.pool = BlockPool(profile.num_gpu_blocks, prefix_caching=prefix_caching, sink=kv_sink)
        self.max_segment_s = max_segment_s
        self.report_progress = report_progress
        self.waiting: deque[EngineRequest] = deque()
        self.prefilling: list[EngineRequest] = []
        self.clock = 0
        self.busy_until: float | None = None
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.completed = 0
        self._decoding: dict[int, EngineRequest] = {}
        self._finish_heap: list[tuple[int, int, int, EngineRequest]] = []
        self._ctx_offset = 0  # Σ(ctx at join − clock at join) over decoding requests
        self._decode_held = 0  # blocks held by decoding requests, prompt blocks included
        self._step: _Step | None = None
        self._order = itertools.count()
        self._admit_order: dict[int, int] = {}
        self._adapters_running: Counter[str] = Counter()
        self._adapters_waiting: Counter[str] = Counter()
        self._resident: dict[str, None] = {}  # LoRA slots, LRU order
        self._derive_constants()

    # ------------------------------------------------------------------ public API

    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self._decoding)

    @property
    def idle(self) -> bool:
        return self._step is None

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks really in use, as vLLM reports it.

        `pool.used` also holds the blocks booked ahead for a decode segment (up to the
        next finish when segments are uncapped); vLLM takes a block only when a token
        needs it, so that booking is left out, estimating each decoding request's
        partly filled last block as half a block.
        """
        held = self._decode_held
        if not held:
            return self.pool.usage
        in_use = -(-self._decode_ctx() // BLOCK_SIZE) + len(self._decoding) // 2
        slack = max(0, held - in_use)
        return (self.pool.used - slack) / self.pool.num_blocks

    def submit(self, request: EngineRequest, now: float) -> None:
        """Queue a request; if the pod is mid-segment, cut the segment at the next step."""
        if request.adapter and not self.profile.max_loras:
            raise ValueError(f"adapter {request.adapter!r} requested but max_loras is 0")
        request.arrival = now
        request._target = request.prompt_tokens
        self.waiting.append(request)
        if request.adapter:
            self._adapters_waiting[request.adapter] += 1
        step = self._step
        if step is None:
            self._start_step(now)
        elif step.steps > 1:
            done = max(1, -int(-(now - step.start) // step.dt))  # ceil, at least one
            if done < step.steps:
                step.steps = done
                self.busy_until = step.start + done * step.dt

    def abort(self, request: EngineRequest, now: float) -> bool:
        """The client left: drop the request wherever it is (queue, prefill, decode), hand
        back its KV blocks and batch slot, and finish it with the tokens generated so far,
        as vLLM aborts a request whose client disconnected. False when it had finished.

        Call after `advance(now)`. A prefill chunk of the step in progress is dropped from
        it; a decode segment in progress keeps its length (the others' next finish is no
        earlier), and its booked blocks are trimmed when the next segment books."""
        if request.finish_time is not None:
            return False
        generated = request.generated(self.clock)
        adapter = request.adapter
        if request in self.waiting:
            self.waiting.remove(request)
            if adapter:
                self._adapters_waiting[adapter] -= 1
                self._adapters_running[adapter] += 1  # `_finish` takes it off running
        elif request in self.prefilling:
            self.prefilling.remove(request)
            self._release_prompt(request)
            step = self._step
            if step is not None and step.chunks:
                step.chunks = [(r, n) for r, n in step.chunks if r is not request]
        elif self._decoding.get(request._seq) is request:
            self._leave_decode(request)
            request._finish_clock = 0
        request._epoch += 1  # its finish-heap entry is stale now
        request.output_tokens = generated
        self._finish(request, now)
        return True

    def requests(self) -> list[EngineRequest]:
        """Every request on the pod: queued, prefilling or decoding (a pod that is lost
        loses them all: `sim.faults`)."""
        return [*self.waiting, *self.prefilling, *self._decoding.values()]

    def advance(self, now: float) -> None:
        """Finish every step that ends at or before `now`, starting the next ones."""
        while self.busy_until is not None and self.busy_until <= now:
            self._commit()

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(
            num_waiting=len(self.waiting),
            num_running=self.num_running,
            kv_usage=self.kv_usage,
            running_adapters=tuple(sorted(a for a, n in self._adapters_running.items() if n)),
            waiting_adapters=tuple(sorted(a for a, n in self._adapters_waiting.items() if n)),
            max_loras=self.profile.max_loras,
            num_gpu_blocks=self.profile.num_gpu_blocks,
            block_size=BLOCK_SIZE,
            prefix_cache_queries=self.prefix_queries,
            prefix_cache_hits=self.prefix_hits,
        )

    def outstanding_tokens(self) -> int:
        """Prompt tokens still to prefill, queued or running: what a new request waits behind."""
        queued = sum(r.prompt_tokens for r in self.waiting)
        return queued + sum(r._target - r._computed for r in self.prefilling)

    # ------------------------------------------------------------------ step time

    def _derive_constants(self) -> None:
        """Per-token and per-step times of the roofline, for the pod's TP group.

        Every GPU of the group holds 1/TP of the weights and its share of the KV heads
        and computes 1/TP of the FLOPs, so bandwidth and peak scale with TP. Each layer
        ends its attention and its MLP with an all-reduce of the step's activations
        (tokens × hidden × 2 bytes) over the instance's interconnect: a ring takes
        `2(TP−1)/TP × bytes / busbw` plus a fixed latency. A mixture of experts computes
        with its active parameters and reads, per step of n tokens, the dense weights and
        the expected share `1 − (1 − k/E)^n` of the expert weights.
        """
        p = self.profile
        g, m, inst = p.gpu, p.model, p.instance
        peak = g.dense_fp8_tflops if m.weight_dtype == "fp8" and g.dense_fp8_tflops else None
        flops = (peak or g.dense_bf16_tflops) * 1e12 * p.tp
        ring = 2 * (p.tp - 1) / p.tp
        self._t_overhead = g.step_overhead_ms / 1000 + (
            m.layers * 2 * inst.allreduce_latency_us / 1e6 if p.tp > 1 else 0.0
        )
        self._t_allreduce_token = (
            m.layers * 2 * ring * m.hidden * 2 / (inst.allreduce_busbw_gbs * 1e9)
        )
        bandwidth = g.bandwidth_gbs * 1e9 * g.bandwidth_efficiency * p.tp
        self._t_weights = (m.weight_gib - m.expert_weight_gib) * 2**30 / bandwidth
        self._t_experts = m.expert_weight_gib * 2**30 / bandwidth
        self._expert_miss = 1 - m.experts_per_token / m.experts if m.experts else 1.0
        self._t_kv_per_token = m.kv_bytes_per_token_per_gpu(p.tp) * p.tp / bandwidth
        linear = 2 * m.compute_params_b * 1e9
        attn = 4 * m.layers * m.q_heads * m.head_dim  # FLOPs per token per context position
        self._t_prefill_token = linear / (flops * g.mfu_prefill)
        self._t_prefill_attn = attn / (flops * g.mfu_prefill)
        self._t_decode_token = linear / (flops * g.mfu_decode)
        self._t_decode_attn = attn / (flops * g.mfu_decode)

    def weight_read_time(self, tokens: int) -> float:
        """Seconds to read the weights a step of `tokens` tokens touches (all of a dense
        model's; a mixture of experts' dense part and the experts its tokens route to)."""
        if not self._t_experts:
            return self._t_weights
        return self._t_weights + self._t_experts * (1 - self._expert_miss**tokens)

    def step_time(self, prefill_tokens: int, prefill_ctx: float, decodes: int, ctx: float) -> float:
        """Roofline time of one step.

        prefill_tokens: tokens prefilled this step; prefill_ctx: Σ of their positions
        decodes: decode tokens; ctx: Σ of the decoding requests' context lengths
        """
        compute = (
            prefill_tokens * self._t_prefill_token
            + prefill_ctx * self._t_prefill_attn
            + decodes * self._t_decode_token
            + ctx * self._t_decode_attn
        )
        tokens = prefill_tokens + decodes
        memory = self.weight_read_time(tokens) + ctx * self._t_kv_per_token
        return (
            self._t_overhead
            + tokens * self._t_allreduce_token
            + (compute if compute > memory else memory)
        )

    # ------------------------------------------------------------------ scheduling

    def _decode_ctx(self) -> int:
        """Σ context length of the decoding requests at the current clock."""
        return self._ctx_offset + len(self._decoding) * self.clock

    def _start_step(self, now: float) -> None:
        if not self.waiting and not self.prefilling:
            self._start_decode_segment(now)
            return
        self._book_decode_blocks(1)  # admission must see one decode step booked
        n_decode = len(self._decoding)
        budget = self.profile.max_num_batched_tokens - n_decode
        chunks: list[tuple[EngineRequest, int]] = []
        for request in self.prefilling:
            if budget <= 0:
                break
            n = min(request._target - request._computed, budget)
            chunks.append((request, n))
            budget -= n
        lora_load = 0.0
        if budget > 0 and self.waiting:
            lora_load = self._admit(budget, chunks)
        if not chunks and not lora_load:  # nothing admissible: decode only
            self._start_decode_segment(now)
            return
        prefill_tokens = 0
        prefill_ctx = 0.0
        for request, n in chunks:
            prefill_tokens += n
            prefill_ctx += n * (request._computed + n / 2)
        ctx = self._ctx_offset + n_decode * self.clock
        dt = self.step_time(prefill_tokens, prefill_ctx, n_decode, ctx) + lora_load
        self._step = _Step(now, dt, 1, chunks)
        self.busy_until = now + dt

    def _start_decode_segment(self, now: float) -> None:
        """The common case, nothing to prefill: k identical decode steps in one event.

        The hottest path of a long simulation, so the uncapped case (the simulator's)
        inlines the next-finish lookup, the block booking and the decode-only roofline
        with the same arithmetic as `_steps_to_next_finish`, `_book_decode_blocks` and
        `step_time`; anything unusual (preemption, a segment cap) takes the general path.
        """
        n = len(self._decoding)
        if not n:
            self._release_decode_slack()
            self._step = None
            self.busy_until = None
            return
        cap = self.max_segment_s
        if cap is None:
            heap = self._finish_heap
            while heap[0][2] != heap[0][3]._epoch:
                heapq.heappop(heap)
            steps = heap[0][0] - self.clock
            pool = self.pool
            base = self._ctx_offset + n * self.clock
            held = self._decode_held
            if steps * n <= (pool.num_blocks - pool.used + held - n) * BLOCK_SIZE - base:
                need = -(-(base + n * steps) // BLOCK_SIZE) + n - held
                if need > 0:
                    pool.grow(need)
                elif need < 0:
                    pool.release((), -need)
                self._decode_held = held + need
                mean_ctx = base + n * steps / 2
                compute = n * self._t_decode_token + mean_ctx * self._t_decode_attn
                memory = mean_ctx * self._t_kv_per_token + (
                    self.weight_read_time(n) if self._t_experts else self._t_weights
                )
                dt = (
                    self._t_overhead
                    + n * self._t_allreduce_token
                    + (compute if compute > memory else memory)
                )
                self._step = _Step(now, dt, steps, _NO_CHUNKS)
                self.busy_until = now + dt * steps
                return
        steps = self._steps_to_next_finish()
        if cap is not None:  # book no further ahead than the segment runs
            steps = max(1, min(steps, int(cap // self.step_time(0, 0, n, self._decode_ctx()))))
        steps = self._book_decode_blocks(steps)
        n = len(self._decoding)  # booking may have preempted
        if not n:
            self._start_step(now)
            return
        dt = self.step_time(0, 0, n, self._decode_ctx() + n * steps / 2)
        if cap is not None:
            steps = max(1, min(steps, int(cap // dt)))
        self._step = _Step(now, dt, steps, _NO_CHUNKS)
        self.busy_until = now + dt * steps

    def _steps_to_next_finish(self) -> int:
        heap = self._finish_heap
        while heap and heap[0][2] != heap[0][3]._epoch:
            heapq.heappop(heap)
        return max(1, heap[0][0] - self.clock) if heap else 1

    def _book_decode_blocks(self, steps: int) -> int:
        """Book KV blocks so every decoding request can write `steps` more tokens.

        Books against the bound Σ⌈c/16⌉ ≤ Σc/16 + n, so the pool never over-commits.
        Returns the steps actually booked (fewer when blocks are short); preempts the
        newest request while not even one step fits, as vLLM's recompute preemption does.
        A booking larger than needed (left by a segment cut short by an arrival) is
        handed back, so waiting requests see the blocks decode does not really use.
        """
        pool = self.pool
        while self._decoding:
            n = len(self._decoding)
            base = self._decode_ctx()
            fit = ((pool.free + self._decode_held - n) * BLOCK_SIZE - base) // n
            k = min(steps, fit)
            if k >= 1:
                need = -(-(base + n * k) // BLOCK_SIZE) + n - self._decode_held
                if need > 0:
                    pool.grow(need)
                elif need < 0:
                    pool.release((), -need)
                self._decode_held += need
                return k
            self._preempt_newest()
        return steps

    def _release_decode_slack(self) -> None:
        if not self._decoding and self._decode_held:
            self.pool.release((), self._decode_held)
            self._decode_held = 0

    def _admit(self, budget: int, chunks: list[tuple[EngineRequest, int]]) -> float:
        """Admit waiting requests FCFS; returns the LoRA load time this step pays."""
        p, pool, waiting = self.profile, self.pool, self.waiting
        lora_load = 0.0
        skipped: list[EngineRequest] = []
        prefilling, decoding, max_seqs = self.prefilling, self._decoding, p.max_num_seqs
        while waiting and budget > 0 and len(prefilling) + len(decoding) < max_seqs:
            request = waiting[0]
            adapter = request.adapter
            if adapter and adapter not in self._resident:
                if not self._load_adapter(adapter):
                    skipped.append(waiting.popleft())  # no slot: others go ahead (vLLM V1)
                    continue
                lora_load += p.lora_load_s
            hashes = request.block_hashes[: request._target // BLOCK_SIZE]
            blocks = -(-request._target // BLOCK_SIZE)
            private = blocks - len(hashes)
            hit = pool.match_prefix(hashes) if hashes else 0
            if not pool.try_acquire(hashes, private):
                break  # head of line waits for blocks
            waiting.popleft()
            if adapter:
                self._adapters_waiting[adapter] -= 1
                self._adapters_running[adapter] += 1
                self._resident[adapter] = None
                self._resident_touch(adapter)
            cached = min(hit * BLOCK_SIZE, request._target - 1)
            request._computed = cached
            request._held_hashes = hashes
            request._prompt_blocks = blocks
            request._seq = next(self._order)
            if request.preemptions == 0:
                request.cached_tokens = cached
                self.prefix_queries += request._target
                self.prefix_hits += cached
            prefilling.append(request)
            n = min(request._target - cached, budget)
            chunks.append((request, n))
            budget -= n
        waiting.extendleft(reversed(skipped))
        return lora_load

    def _load_adapter(self, adapter: str) -> bool:
        resident, running = self._resident, self._adapters_running
        if len(resident) >= self.profile.max_loras:
            idle = next((a for a in resident if not running[a]), None)
            if idle is None:
                return False
            del resident[idle]
        resident[adapter] = None
        return True

    def _resident_touch(self, adapter: str) -> None:
        self._resident.pop(adapter)
        self._resident[adapter] = None

    # ------------------------------------------------------------------ commit

    def _commit(self) -> None:
        step = self._step
        assert step is not None and self.busy_until is not None
        end = self.busy_until
        if self._decoding:
            clock = self.clock = self.clock + step.steps
            heap = self._finish_heap
            while heap and heap[0][0] <= clock:
                _, _, epoch, request = heapq.heappop(heap)
                if epoch == request._epoch:
                    self._leave_decode(request)
                    self._finish(request, end)
        for request, n in step.chunks:
            request._computed += n
            if request._computed < request._target:
                continue
            self.prefilling.remove(request)
            generated = request._generated_before + 1
            if request.first_token_time is None:
                request.first_token_time = end
                if self.listener is not None:
                    self.listener.on_first_token(request, end)
            if generated >= request.output_tokens:
                self._release_prompt(request)
                self._finish(request, end)
            else:
                self._join_decode(request, generated)
        if self.report_progress and self.listener is not None:
            self.listener.on_step(end)
        self._start_step(end)

    def _join_decode(self, request: EngineRequest, generated: int) -> None:
        request._decode_base = self.clock - generated
        request._finish_clock = self.clock + request.output_tokens - generated
        self._decoding[request._seq] = request
        self._ctx_offset += request.prompt_tokens - request._decode_base
        self._decode_held += request._prompt_blocks
        heapq.heappush(
            self._finish_heap, (request._finish_clock, request._seq, request._epoch, request)
        )

    def _leave_decode(self, request: EngineRequest) -> None:
        """Remove a decoding request and hand back its blocks (prompt and generated)."""
        del self._decoding[request._seq]
        self._ctx_offset -= request.prompt_tokens - request._decode_base
        ctx = request.prompt_tokens + self.clock - request._decode_base
        own = max(request._prompt_blocks, -(-ctx // BLOCK_SIZE))
        self._decode_held -= own
        self.pool.release(request._held_hashes, own - len(request._held_hashes))
        self._release_decode_slack()

    def _release_prompt(self, request: EngineRequest) -> None:
        self.pool.release(request._held_hashes, request._prompt_blocks - len(request._held_hashes))

    def _finish(self, request: EngineRequest, end: float) -> None:
        request.finish_time = end
        self.completed += 1
        if request.adapter:
            self._adapters_running[request.adapter] -= 1
        if self.listener is not None:
            self.listener.on_finish(request, end)

    def _preempt_newest(self) -> None:
        """Recompute preemption: the newest running request goes back to the queue head."""
        newest = max(
            itertools.chain(self.prefilling, self._decoding.values()), key=lambda r: r._seq
        )
        if newest._seq in self._decoding and self._decoding[newest._seq] is newest:
            generated = self.clock - newest._decode_base
            self._leave_decode(newest)
            newest._finish_clock = 0
        else:
            self.prefilling.remove(newest)
            generated = newest._generated_before
            self._release_prompt(newest)
        newest._epoch += 1
        newest.preemptions += 1
        newest._generated_before = generated
        newest._target = newest.prompt_tokens + generated
        newest._computed = 0
        if newest.adapter:
            self._adapters_running[newest.adapter] -= 1
            self._adapters_waiting[newest.adapter] += 1
        self.waiting.appendleft(newest)
