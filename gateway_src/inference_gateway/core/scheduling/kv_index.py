"""What each pod really holds in its prefix cache, from the pod's own KV events.

The approximate index (`plugins.prefix.PrefixIndex`) records where the picker *sent*
each prompt; after the pod evicts, it still predicts hits that miss. This index records
what the pod *kept*: `BlockStored` adds block hashes, `BlockRemoved` drops them,
`AllBlocksCleared` empties the pod (`kv_events` for the wire format). It is fed by the
live picker's ZMQ subscriber and, on the virtual clock, by the simulator, through the
same `ingest` calls.

Memory grows with what the fleet caches, not with pods times capacity: one
fleet-wide set of (block hash, holder) pairs in machine-word arrays (`block_pairs`: 12
bytes a pair, a block's holders side by side), pods interned to small ids (recycled when
a pod leaves), and per holder a log of the hashes it stored, oldest first (8 bytes an
entry; entries a removal left behind are dropped when the log grows past twice what the
pod holds). About 22 bytes per cached (block, holder) in all, against 188 when each pod
had its own dict (`bench/kv_events.py` measures both); and nothing per block is an
object the garbage collector tracks or even allocates. Each holder is bounded: at most
the pod's KV capacity in blocks (from its `vllm:cache_config_info` scrape, set by the
subscriber as scrapes come and by each pick; `UNKNOWN_CAPACITY` until known, never above
`max_blocks_per_pod`), the oldest stored block dropped first when an event stream that
lost removals would exceed it (oldest by its first store: storing a held block again
does not renew it; a block evicted and stored again may go early, by its first entry).

A pod's publisher is trusted no further than an engine step can go: one step cannot
store, or evict, more blocks than the pod has, nor carry many more events than that.
A batch that does (a broken or hostile publisher: one `BlockStored` of a million hashes
from a pod of 26,307 blocks) is refused when it gets there, before its hashes are even
decoded (`kv_events.hash_count`), and counted (`refused`); the events before that point
stay applied, and the pod is not marked heard. The live subscriber applies batches
through `ingest_slices`, a generator that yields every `SLICE_BLOCKS` blocks of work, so
it can hand the event loop back between slices: a large batch never holds a request.

The index also keeps what the fleet *lost*: a block some pod evicted that no pod holds
any more is remembered (oldest forgotten first, at most the fleet's capacity in blocks:
the blocks a cache twice the fleet's size would still hold, as an adaptive-replacement
cache's ghost list does). A pick that recomputes such blocks (`note_pick`) is the cost
of an earlier eviction paid: `recompute_share`, the decayed share of the tokens picks
compute that the fleet had cached and evicted, says how much of today's prefill a
larger (or better used) cache would save. The predicted-TTFT scorer prices the
evictions a pick causes by it (`plugins.predicted_ttft`), and `/metrics` exports it
(`igw_kv_recompute_share`): near 0, evictions cost nothing; high, the pods' caches are
too small for the traffic's working set.

A pod's events are *stale* when the picker has sent it uncached blocks (`expect`) and
no event came within `stale_after_s`: an idle pod publishes nothing and stays fresh, a
pod whose publisher died is found out by its next few requests. For a stale pod the
scorer falls back to the approximate index until events flow again.

Events that flow but never carry the blocks the picker hashed are worse than none: the
pod's prompts were tokenized or hashed differently (another tokenizer or chat template,
`--prefix-caching-hash-algo`, `PYTHONHASHSEED`, `--block-size`), so every precise match
would be 0. The scorer therefore asks, for each request that reached its first token
(the pod has prefilled and stored its prompt), whether the request's last full block is
in the pod's events when the request finishes (`check`: a running request's blocks
cannot be evicted, so they are held then unless their event is still on its way), or
else `CHECK_GRACE_S` later (held, or evicted and remembered as lost, counts). Each
answer is counted per pod (exported as `igw_kv_events_matched_total` /
`igw_kv_events_unmatched_total`);
`MISMATCH_RUN` misses in a row mark the pod's events as not matching: it is scored
like a stale pod (the approximate index) until a request matches again, and a warning
names the pod and, from a chain-start block it stored after a miss (hash and token ids:
only that block's are read, `kv_events.leading_ints`, and only from a pod that missed),
the likely cause: block size, hash algorithm or seed, or the token ids themselves.
"""

from __future__ import annotations

import logging
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

from inference_gateway.core.scheduling.block_pairs import LOST, BlockPairs
from inference_gateway.protocols.vllm.kv_events import (
    AllBlocksCleared,
    BatchView,
    BlockRemoved,
    BlockRemovedView,
    BlockStored,
    BlockStoredView,
    KVEventBatch,
    array_length,
    decode_event,
    decode_hashes,
    event_views,
    hash_count,
    leading_ints,
)

__all__ = ["KVBlockIndex"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCKS = 1 << 20  # the most any pod may claim (~16 M tokens of 16)
UNKNOWN_CAPACITY = 1 << 16  # a pod whose scrape has not said (1 M tokens, ~26 MB)
SLICE_BLOCKS = 2048  # blocks of work between two yields of `ingest_slices` (~1-2 ms)
EVENT_ALLOWANCE = 1024  # events a step may carry beyond one per stored or evicted block
MAX_BLOCK_SIZE = 1024  # the largest block the scorer hashes (so the most a sample reads)
RECOMPUTE_DECAY = 0.99  # weight of history per pick: the share follows the last ~100 picks
CHECK_GRACE_S = 2.0  # after a first token, the pod's event for the prompt is due within this
MISMATCH_RUN = 8  # misses in a row that mark a pod's events as not matching the picker's
MAX_CHECKS = 4096  # pending checks kept (the oldest dropped first)
#: (hash, token ids, block size) of a stored chain's first block: what the diagnosis rehashes
Sample = tuple[int, Sequence[int], int]

Event = BlockStored | BlockRemoved | AllBlocksCleared | BlockStoredView | BlockRemovedView


class _Pod:
    __slots__ = (
        "capacity",
        "count",
        "expected_at",
        "head",
        "id",
        "last_event",
        "log",
        "matched",
        "run",
        "sample",
        "unmatched",
    )

    def __init__(self, holder: int, capacity: int) -> None:
        self.id = holder  # its holder id in the pairs
        self.count = 0  # pairs it holds
        self.log = array("Q")  # hashes it stored, oldest first from `head` (some gone since)
        self.head = 0
        self.capacity = capacity
        self.last_event = float("-inf")
        self.expected_at: float | None = None  # first pick with new blocks since the last event
        self.matched = 0  # checks whose block was in the pod's events
        self.unmatched = 0  # and whose block was not
        self.run = 0  # misses since the last match
        self.sample: Sample | None = None


class KVBlockIndex:
    def __init__(
        self,
        *,
        max_blocks_per_pod: int = DEFAULT_MAX_BLOCKS,
        stale_after_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_blocks_per_pod = max_blocks_per_pod
        self.stale_after_s = stale_after_s
        self.clock = clock
        self._pods: dict[str, _Pod] = {}
        self._pairs = BlockPairs()  # see the module docstring
        self._names = [""]  # holder id -> pod name (id 0: the lost blocks)
        self._free: list[int] = []  # ids of pods that left, for the next pod
        self.events = 0  # events ingested, for the benchmark and /metrics
        self.refused = 0  # batches that went past what one engine step can do (/metrics)
        self.heard_any = False  # no pod's events ever arrived: every pod scores as sent
        self.fallbacks = 0  # scoring decisions that used the approximate index for a pod
        # blocks a pod evicted that no pod holds now, oldest first (see the module docstring)
        self._lost = _Pod(LOST, 0)
        self._capacity = 0  # Σ the pods' capacities: the bound of `_lost`
        self._recomputed = 0.0  # decayed Σ tokens picks recompute that the fleet evicted
        self._computed = 0.0  # decayed Σ tokens picks compute
        # (due, pod, block hash, pick time): blocks a pod's events should show by `due`
        self._checks: deque[tuple[float, str, int, float]] = deque(maxlen=MAX_CHECKS)
        # the scorer's hash of one block's token ids (None: another block size), and its
        # hashing parameters in words: what the mismatch warning compares and names
        self.rehash: Callable[[Sequence[int], int], int | None] | None = None
        self.hashing = ""

    # ------------------------------------------------------------------ feeding

    def _pod(self, pod: str) -> _Pod:
        state = self._pods.get(pod)
        if state is None:
            if self._free:
                holder = self._free.pop()
                self._names[holder] = pod
            else:
                holder = len(self._names)
                self._names.append(pod)
            capacity = min(UNKNOWN_CAPACITY, self.max_blocks_per_pod)
            state = self._pods[pod] = _Pod(holder, capacity)
            self._capacity += state.capacity
        return state

    def set_capacity(self, pod: str, blocks: int) -> None:
        """Called on every pick; only a changed capacity can leave blocks to trim
        (`stored` keeps each pod within its capacity)."""
        state = self._pod(pod)
        capacity = max(1, min(blocks, self.max_blocks_per_pod))
        if capacity != state.capacity:
            self._capacity += capacity - state.capacity
            state.capacity = capacity
            self._trim(state)
            self._bound_evicted()

    def ingest(self, pod: str, batch: KVEventBatch) -> None:
        """Apply one decoded batch from `pod` at once (in sequence order)."""
        for _ in self.ingest_slices(pod, batch.events):
            pass

    def ingest_view(self, pod: str, view: BatchView) -> Iterator[None]:
        """Apply a lazily read batch (`kv_events.decode_view`), in slices (see
        `ingest_slices`); `msgspec.DecodeError` when an event does not decode."""
        state = self._pod(pod)
        if array_length(view.events) > 2 * state.capacity + EVENT_ALLOWANCE:
            self.refused += 1
            return
        events = event_views(view)  # one pass over the payload, then a slice's break
        yield
        yield from self.ingest_slices(pod, map(decode_event, events))

    def ingest_slices(self, pod: str, events: Iterable[Event]) -> Iterator[None]:
        """Apply one batch's events in order, yielding after each `SLICE_BLOCKS` blocks
        of work; a batch past one engine step's reach is refused there (module docstring)."""
        state = self._pod(pod)
        stored_left = removed_left = state.capacity
        sampling = state.run > 0  # a pod that missed a check: keep a block to diagnose by
        work = 0
        for event in events:
            if isinstance(event, AllBlocksCleared):
                yield from self._clear_slices(state)
            else:
                count = hash_count(event.block_hashes)
                is_store = isinstance(event, (BlockStored, BlockStoredView))
                left = stored_left if is_store else removed_left
                if count > left:
                    self.refused += 1
                    return
                if is_store:
                    stored_left -= count
                else:
                    removed_left -= count
                apply = self.stored if is_store else self.removed
                hashes = decode_hashes(event.block_hashes)
                if sampling and count and isinstance(event, (BlockStored, BlockStoredView)):
                    self._sample(state, event, hashes[0])
                for start in range(0, count, SLICE_BLOCKS):
                    apply(pod, hashes[start : start + SLICE_BLOCKS], state)
                    work += min(SLICE_BLOCKS, count - start)
                    if work >= SLICE_BLOCKS:
                        work = 0
                        yield
            self.events += 1
            work += 1
            if work >= SLICE_BLOCKS:
                work = 0
                yield
        self.heard(pod, state)
        if self._checks:
            self.settle()

    @staticmethod
    def _sample(state: _Pod, event: BlockStored | BlockStoredView, first: int) -> None:
        """Keep the first block of a chain the pod stored (no adapter): its token ids
        and hash tell the mismatch warning why (`_diagnosis`). Only the block's own
        token ids are read, and only from a block no larger than the scorer's largest."""
        if event.parent_block_hash is not None or event.lora_id is not None:
            return
        size = event.block_size
        if not 0 < size <= MAX_BLOCK_SIZE:
            state.sample = (first, (), size)  # a size the scorer cannot have: enough to say
            return
        tokens = leading_ints(event.token_ids, size)
        if tokens is not None:
            state.sample = (first, tokens, size)

    def heard(self, pod: str, state: _Pod | None = None) -> None:
        """The pod's stream is alive now (a batch, or a replay that answered)."""
        state = state or self._pod(pod)
        state.last_event = self.clock()
        self.heard_any = True
        state.expected_at = None

    def stored(self, pod: str, hashes: Iterable[int], state: _Pod | None = None) -> None:
        state = state or self._pod(pod)
        added, found = self._pairs.store(hashes, state.id, state.log)
        state.count += added
        self._lost.count -= found
        if state.count > state.capacity:
            self._trim(state)
        self._compact(state)

    def removed(self, pod: str, hashes: Iterable[int], state: _Pod | None = None) -> None:
        """The pod evicted these blocks: a block no pod holds now is remembered as lost."""
        state, lost = state or self._pod(pod), self._lost
        dropped, became = self._pairs.evict(hashes, state.id, lost.log)
        state.count -= dropped
        lost.count += became
        self._compact(lost)
        self._bound_evicted()

    def _bound_evicted(self) -> None:
        self._lost.capacity = self._capacity
        self._trim(self._lost)

    def clear(self, pod: str) -> None:
        state = self._pods.get(pod)
        if state is not None:
            for _ in self._clear_slices(state):
                pass

    def _clear_slices(self, state: _Pod) -> Iterator[None]:
        while state.head < len(state.log):
            self._drop_oldest(state, SLICE_BLOCKS)
            yield
        state.log, state.head = array("Q"), 0

    def forget(self, pod: str) -> None:
        """The pod left the pool: drop everything about it (its id goes to the next pod)."""
        self.clear(pod)
        state = self._pods.pop(pod, None)
        if state is not None:
            self._names[state.id] = ""
            self._free.append(state.id)
            self._capacity -= state.capacity
            self._bound_evicted()

    def _drop_oldest(self, state: _Pod, n: int) -> None:
        """Drop the pod's `n` oldest log entries, and the pairs they still name."""
        log, head, discard, holder = state.log, state.head, self._pairs.discard, state.id
        end = min(len(log), head + n)
        for i in range(head, end):
            if discard(log[i], holder):
                state.count -= 1
        state.head = end
        if end > len(log) >> 1:
            del log[:end]
            state.head = 0

    def _trim(self, state: _Pod) -> None:
        while state.count > state.capacity and state.head < len(state.log):
            self._drop_oldest(state, state.count - state.capacity)

    def _compact(self, state: _Pod) -> None:
        """Rewrite the log without what is gone, when that is most of it (amortized O(1)
        a store): each held hash once, in its latest place."""
        log, head = state.log, state.head
        if len(log) - head <= 2 * state.count + SLICE_BLOCKS:
            return
        has, holder, seen = self._pairs.has, state.id, set()
        kept = []
        for i in range(len(log) - 1, head - 1, -1):
            h = log[i]
            if h not in seen and has(h, holder):
                seen.add(h)
                kept.append(h)
        kept.reverse()
        state.log, state.head = array("Q", kept), 0

    def note_pick(
        self, hashes: Sequence[int], held: int, computed_tokens: int, block_size: int
    ) -> None:
        """A pick computes `computed_tokens` of a prompt with these block hashes, whose
        first `held` blocks some pod holds: the lost blocks after them are recomputed."""
        lost = 0
        if self._lost.count:
            has = self._pairs.has
            for i in range(held, len(hashes)):
                if not has(hashes[i], LOST):
                    break
                lost += 1
        decay = RECOMPUTE_DECAY
        self._recomputed = self._recomputed * decay + min(lost * block_size, computed_tokens)
        self._computed = self._computed * decay + computed_tokens

    # ------------------------------------------------------------------ reading

    @property
    def recompute_share(self) -> float:
        """Decayed share of the tokens picks computed that the fleet had evicted, in [0, 1]."""
        computed = self._computed
        return self._recomputed / computed if computed > 0 else 0.0

    def evicted(self) -> int:
        """Lost blocks remembered now (the memory the lost set costs, in entries)."""
        return self._lost.count

    def pairs(self) -> int:
        """(block, holder) pairs held now, the lost blocks' included (one each)."""
        return self._pairs.size

    def nbytes(self) -> int:
        """Bytes the index's per-block state takes: the pairs' arrays and every holder's
        log, the lost set's included (what grows with the cache; the per-pod records and
        the checks are bounded by the pods' count). `bench/scale.py` reads it per pair."""
        logs = sum(sys.getsizeof(state.log) for state in self._pods.values())
        return self._pairs.nbytes() + logs + sys.getsizeof(self._lost.log)

    def expect(self, pod: str) -> None:
        """The picker just sent `pod` blocks it does not hold: events should follow."""
        state = self._pod(pod)
        if state.expected_at is None:
            state.expected_at = self.clock()

    def fresh(self, pod: str) -> bool:
        """Whether the pod's events can be trusted (see the module docstring)."""
        state = self._pods.get(pod)
        if state is None or state.last_event == float("-inf") or state.run >= MISMATCH_RUN:
            return False
        expected = state.expected_at
        return expected is None or self.clock() - expected <= self.stale_after_s

    # ------------------------------------------------------------------ matching

    def check(self, pod: str, block_hash: int, picked_at: float) -> None:
        """A request picked for `pod` at `picked_at` (this index's clock), prefilled
        there, has finished: its last full block `block_hash` should be in the pod's
        events now, or within `CHECK_GRACE_S` (see the module docstring)."""
        if self.holds(pod, block_hash):
            state = self._pods[pod]
            state.matched += 1
            state.run = 0
            return
        self._checks.append((self.clock() + CHECK_GRACE_S, pod, block_hash, picked_at))

    def settle(self) -> None:
        """Answer the checks that are due (see the module docstring)."""
        checks, now = self._checks, self.clock()
        while checks and checks[0][0] <= now:
            _, pod, block_hash, picked_at = checks.popleft()
            state = self._pods.get(pod)
            if state is None or state.last_event < picked_at:
                continue  # nothing heard since the pick: the staleness rule's business
            if self._pairs.has(block_hash, state.id) or self._pairs.has(block_hash, LOST):
                state.matched += 1
                state.run = 0
                continue
            state.unmatched += 1
            state.run += 1
            if state.run == MISMATCH_RUN:
                log.warning(
                    "kv events: pod %s: none of the last %d requests it served has its "
                    "blocks in the pod's KV events: %s. Its prefix scores use the "
                    "approximate index until they match (igw_kv_events_unmatched_total; "
                    "the scorer hashes with %s)",
                    pod,
                    MISMATCH_RUN,
                    self._diagnosis(state),
                    self.hashing or "its defaults",
                )

    def _diagnosis(self, state: _Pod) -> str:
        sample, rehash = state.sample, self.rehash
        if sample is None or rehash is None:
            return "no first block of a chain seen from the pod yet to tell why"
        block_hash, tokens, size = sample
        ours = rehash(tokens, size)
        if ours is None:
            return f"the pod stores blocks of {size} tokens, the scorer's blockSize differs"
        if ours != block_hash:
            return (
                "the pod hashes its own token ids differently: the scorer's hashAlgo or "
                "hashSeed differs from the pod's --prefix-caching-hash-algo or PYTHONHASHSEED"
            )
        return (
            "the pod hashes token ids as the scorer does, so its token ids differ: the "
            "scorer's tokenizer files or chat template are not the served model's"
        )

    def match_counts(self) -> dict[str, tuple[int, int]]:
        """Per pod: checks (matched, unmatched) so far (`settle` first)."""
        self.settle()
        return {pod: (s.matched, s.unmatched) for pod, s in self._pods.items()}

    def matching(self, pod: str) -> bool:
        """False once the pod's events missed `MISMATCH_RUN` checks in a row."""
        state = self._pods.get(pod)
        return state is None or state.run < MISMATCH_RUN

    def heard_from(self, pod: str) -> bool:
        """Whether the pod's events ever reached this index (subscribed and alive once)."""
        state = self._pods.get(pod)
        return state is not None and state.last_event != float("-inf")

    def blocks(self, pod: str) -> int:
        state = self._pods.get(pod)
        return state.count if state is not None else 0

    def holds(self, pod: str, block_hash: int) -> bool:
        """Whether the pod's events say it holds this block now."""
        state = self._pods.get(pod)
        return state is not None and self._pairs.has(block_hash, state.id)

    def matches(self, hashes: Sequence[int]) -> dict[str, int]:
        """Leading blocks of `hashes` each pod holds (pods with none are absent)."""
        names = self._names
        return {names[holder]: n for holder, n in self._pairs.leading(hashes).items()}
