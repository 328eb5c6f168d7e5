"""The precise prefix index: what pods report they hold, bounded, with staleness."""

from __future__ import annotations

from inference_gateway.core.scheduling.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    decode_batch,
    encode_batch,
)
from inference_gateway.core.scheduling.kv_index import KVBlockIndex


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stored(*hashes: int) -> BlockStored:
    return BlockStored(list(hashes), None, [0] * 16 * len(hashes), 16, None, "GPU")


def batch(*events: BlockStored | BlockRemoved | AllBlocksCleared) -> KVEventBatch:
    return decode_batch(encode_batch(KVEventBatch(ts=0.0, events=list(events))))


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
