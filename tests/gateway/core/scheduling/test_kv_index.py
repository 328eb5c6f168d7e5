"""The precise prefix index: what pods report they hold, bounded, with staleness."""

from __future__ import annotations

import random

import pytest

from inference_gateway.core.scheduling.kv_index import (
    SLICE_BLOCKS,
    UNKNOWN_CAPACITY,
    KVBlockIndex,
)
from inference_gateway.protocols.vllm.kv_events import (
    AllBlocksCleared,
    BatchView,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    decode_batch,
    decode_view,
    encode_batch,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stored(*hashes: int) -> BlockStored:
    return BlockStored(list(hashes), None, [0] * 16 * len(hashes), 16, None, "GPU")


def batch(*events: BlockStored | BlockRemoved | AllBlocksCleared) -> KVEventBatch:
    return decode_batch(encode_batch(KVEventBatch(ts=0.0, events=list(events))))


def wire(*events: BlockStored | BlockRemoved | AllBlocksCleared) -> BatchView:
    """The batch as the live subscriber reads it (lazily)."""
    return decode_view(encode_batch(KVEventBatch(ts=0.0, events=list(events))))


def test_leading_matches_follow_stores_removals_and_clears_per_pod() -> None:
    index = KVBlockIndex()
    index.ingest("a", batch(stored(1, 2, 3, 4)))
    index.ingest("b", batch(stored(1, 2)))
    assert index.matches([1, 2, 3, 4, 5]) == {"a": 4, "b": 2}
    index.ingest("a", batch(BlockRemoved([3], "GPU")))  # a hole: only the run before it
    assert index.matches([1, 2, 3, 4]) == {"a": 2, "b": 2}
    assert index.matches([9, 1]) == {}
    index.ingest("b", batch(AllBlocksCleared()))
    assert index.matches([1, 2]) == {"a": 2} and index.events == 4
    index.forget("a")
    assert index.matches([1]) == {} and index.blocks("a") == 0


def test_memory_is_bounded_by_the_pods_capacity_oldest_first() -> None:
    index = KVBlockIndex(max_blocks_per_pod=100)
    index.stored("a", range(150))
    assert index.blocks("a") == 100 and index.matches([0]) == {}
    assert index.matches([50, 51]) == {"a": 2}
    index.set_capacity("a", 10)  # scraped num_gpu_blocks
    assert index.blocks("a") == 10 and index.matches([139]) == {}
    assert index.matches([140, 141]) == {"a": 2}
    index.set_capacity("a", 10**9)  # never above the hard bound
    index.stored("a", range(1000, 1300))
    assert index.blocks("a") == 100


def test_a_batch_past_one_engine_step_is_refused_where_it_goes_past() -> None:
    """A step cannot store or evict more blocks than the pod has: the events before
    that point stay, the rest is dropped undecoded, the pod is not marked heard."""
    index = KVBlockIndex()
    index.set_capacity("a", 100)
    list(index.ingest_view("a", wire(stored(*range(60)), stored(*range(60, 101)))))
    assert index.refused == 1 and index.blocks("a") == 60 and not index.heard_from("a")
    removals = [BlockRemoved([i], "GPU") for i in range(101)]  # one event a block, as vLLM
    list(index.ingest_view("a", wire(*removals)))
    assert index.refused == 2 and index.blocks("a") == 0
    list(index.ingest_view("a", wire(*[AllBlocksCleared()] * (2 * 100 + 1025))))
    assert index.refused == 3 and index.events == 1 + 100  # what came before each refusal
    list(index.ingest_view("a", wire(stored(1, 2))))
    assert index.heard_from("a") and index.matches([1, 2]) == {"a": 2}


def test_a_pod_of_unknown_capacity_is_held_to_a_default_and_large_batches_come_in_slices() -> None:
    index = KVBlockIndex()
    index.stored("a", range(UNKNOWN_CAPACITY + 10))
    assert index.blocks("a") == UNKNOWN_CAPACITY  # until its scrape says
    index.set_capacity("b", 3 * SLICE_BLOCKS)
    steps = index.ingest_view("b", wire(stored(*range(3 * SLICE_BLOCKS))))
    held = []
    for _ in steps:  # the events split, then one slice at a time
        held.append(index.blocks("b"))
    assert held == [0, SLICE_BLOCKS, 2 * SLICE_BLOCKS, 3 * SLICE_BLOCKS]
    slices = list(index.ingest_view("b", wire(AllBlocksCleared())))
    assert len(slices) == 1 + 3 and index.blocks("b") == 0


def test_a_pod_that_stops_publishing_goes_stale_an_idle_one_does_not() -> None:
    clock = Clock()
    index = KVBlockIndex(stale_after_s=2.0, clock=clock)
    assert not index.fresh("a") and not index.heard_from("a")  # never heard: nothing to trust
    index.ingest("a", batch(stored(1)))
    clock.now = 100.0
    assert index.fresh("a")  # idle for 100 s, nothing sent: still fresh
    index.expect("a")  # the picker sent it new blocks
    clock.now = 101.0
    assert index.fresh("a")
    clock.now = 102.5  # no event 2.5 s after: stale
    assert not index.fresh("a") and index.heard_from("a")
    index.ingest("a", batch(stored(2)))
    assert index.fresh("a")


def test_blocks_the_fleet_evicted_are_remembered_until_stored_again() -> None:
    """A block is lost when the last pod holding it evicts it; a pod storing it again
    (the recompute) forgets it; a pod leaving or resetting its cache loses nothing."""
    index = KVBlockIndex()
    index.ingest("a", batch(stored(1, 2, 3)))
    index.ingest("b", batch(stored(1, 2)))
    index.ingest("a", batch(BlockRemoved([2, 3], "GPU")))  # 2 is still on b
    assert index.evicted() == 1
    index.ingest("b", batch(BlockRemoved([1, 2], "GPU")))
    assert index.evicted() == 2  # 1 is still on a; 2 and 3 are on no pod now
    index.ingest("b", batch(stored(2)))
    assert index.evicted() == 1
    index.ingest("a", batch(AllBlocksCleared()))
    index.forget("b")
    assert index.evicted() == 1


def test_the_lost_blocks_are_bounded_by_the_fleets_capacity_oldest_first() -> None:
    """The memory the lost set costs: at most as many entries as the pods hold, so a
    cache twice the fleet's size (an ARC ghost list's bound)."""
    index = KVBlockIndex()
    index.set_capacity("a", 10)
    index.set_capacity("b", 10)
    for start in range(0, 100, 10):
        index.stored("a", range(start, start + 10))
        index.removed("a", range(start, start + 10))
    assert index.evicted() == 20
    index.note_pick(list(range(80, 90)), 0, 160, 16)  # remembered: all 10 blocks lost
    index.note_pick(list(range(0, 10)), 0, 160, 16)  # forgotten long ago: none
    assert index.recompute_share == pytest.approx(0.99 * 160 / (0.99 * 160 + 160))
    index.forget("b")
    assert index.evicted() == 10


def test_the_recompute_share_counts_only_lost_blocks_after_the_held_run() -> None:
    """`note_pick(hashes, held, computed)`: the lost run starts where the best pod's
    match ends, stops at the first block the fleet never had, and never exceeds what
    the pick computes; with no eviction the share is 0."""
    index = KVBlockIndex()
    assert index.recompute_share == 0.0
    index.ingest("a", batch(stored(1, 2, 3, 4)))
    index.note_pick([1, 2, 3, 4, 5], 4, 16, 16)
    assert index.recompute_share == 0.0
    index.ingest("a", batch(BlockRemoved([3, 4], "GPU")))
    index.note_pick([1, 2, 3, 4, 9, 4], 2, 64, 16)  # 3 and 4 lost, 9 never cached
    assert index.recompute_share == pytest.approx(32 / (0.99 * 16 + 64))
    capped = KVBlockIndex()
    capped.ingest("a", batch(stored(1, 2)))
    capped.ingest("a", batch(BlockRemoved([1, 2], "GPU")))
    capped.note_pick([1, 2], 0, 20, 16)  # 32 lost tokens, but the pick computes 20
    assert capped.recompute_share == 1.0


def test_a_pod_that_leaves_frees_its_id_for_the_next_and_keeps_nothing() -> None:
    index = KVBlockIndex()
    index.ingest("a", batch(stored(1, 2)))
    index.ingest("b", batch(stored(1)))
    index.forget("a")
    index.ingest("c", batch(stored(2, 3)))  # gets a's id: none of a's blocks come with it
    assert index.matches([1, 2]) == {"b": 1} and index.matches([2, 3]) == {"c": 2}
    assert index.blocks("a") == 0 and not index.holds("a", 1) and index.holds("c", 3)
    assert len(index._names) == 3  # the lost set's id, a's (now c's), b's


def test_stores_and_removals_exact_under_churn_and_the_log_stays_bounded() -> None:
    """A pod that stores, evicts and stores again the same blocks for many rounds: the
    index holds exactly what it holds, and its log does not grow with the rounds."""
    rnd, index, held = random.Random(5), KVBlockIndex(), set()
    index.set_capacity("a", 5000)
    for _ in range(200):
        new = {rnd.randrange(3000) for _ in range(40)}
        index.ingest("a", batch(stored(*new)))
        held |= new
        gone = set(rnd.sample(sorted(held), min(len(held), 35)))
        index.ingest("a", batch(BlockRemoved(sorted(gone), "GPU")))
        held -= gone
    assert index.blocks("a") == len(held) and all(index.holds("a", h) for h in held)
    assert not any(index.holds("a", h) for h in set(range(3000)) - held)
    state = index._pods["a"]
    assert len(state.log) - state.head <= 2 * len(held) + SLICE_BLOCKS


def test_hostile_hashes_and_unknown_pods_cost_no_more_than_the_bound() -> None:
    """Hashes outside 64 bits do not raise; a pod never scraped is held to the default
    capacity; a huge batch is refused whole before it is decoded."""
    index = KVBlockIndex()
    index.ingest("ghost", batch(stored(-5, (1 << 64) - 5)))  # one block modulo 2**64
    assert index.blocks("ghost") == 1 and index.matches([-5]) == {"ghost": 1}
    index.stored("ghost", ((1 << 80) + i for i in range(UNKNOWN_CAPACITY + 100)))
    assert index.blocks("ghost") == UNKNOWN_CAPACITY
    index.set_capacity("small", 10)
    list(index.ingest_view("small", wire(stored(*range(10_000)))))
    assert index.refused == 1 and index.blocks("small") == 0
    index.forget("ghost")
    assert index._pairs.size == 0  # nothing left behind by the pods that left


def test_nbytes_reads_what_tracemalloc_sees_grow_with_the_pairs() -> None:
    """The index's own reading of its memory (what `bench/scale.py` reports per pair)
    agrees with every byte Python allocated for it, lost blocks included."""
    import tracemalloc

    rnd = random.Random(3)
    first = [rnd.getrandbits(64) for _ in range(20_000)]  # made outside what is traced
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = KVBlockIndex()
        for p in range(3):
            index.set_capacity(f"pod-{p}", 20_000)
            index.stored(f"pod-{p}", first if p == 0 else (rnd.getrandbits(64) for _ in first))
        index.removed("pod-0", first[:500])  # held nowhere else: remembered as lost
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.pairs() == 60_000 and index.evicted() == 500
    assert 12 * index.pairs() < index.nbytes() <= 64 * index.pairs()
    assert abs(index.nbytes() - grown) < 0.1 * grown
