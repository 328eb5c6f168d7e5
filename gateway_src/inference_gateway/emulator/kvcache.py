"""KV block pool with vLLM-style prefix caching.

Blocks hold `BLOCK_SIZE` tokens. A full prompt block is identified by its chained hash
(each block's hash covers every token before it), so two prompts that share a prefix
share its blocks. When the last request holding a hashed block finishes, the block is
not cleared: it stays cached, counted as free, in an LRU list, and is evicted only when a
new block is needed. A later request whose prompt starts with the same blocks skips
their prefill. A finished request's blocks join the list tail first, as vLLM frees them
(`SingleTypeKVCacheManager.free`: "Free blocks in reverse order so that the tail blocks
are freed first"), so eviction trims a cached context from its end and the head, which
every later prompt of that context needs first, stays longest. Blocks for unique prompt
tails and generated tokens are "private": they never hit, so they are only counted.

Invariant (tested): `used <= num_blocks` at every step.

An optional `sink` hears what vLLM's KV events report: a hashed block entering the
cache (`stored`, in chain order) and a cached block evicted (`removed`), the evictions
an allocation makes before the blocks it stores, as vLLM orders them (`BlockPool.
get_new_blocks` evicts, `cache_full_blocks` stores after), so a subscriber's index never
holds more than the pool, even for a moment, and never trims a live block. The live
emulator publishes them over ZMQ (`kv_publisher`); the simulator feeds them to the
picker's index on its virtual clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Protocol

__all__ = ["BlockPool", "KVEventSink"]


class KVEventSink(Protocol):
    def stored(self, hashes: list[Hashable]) -> None: ...
    def removed(self, hashes: list[Hashable]) -> None: ...


class BlockPool:
    def __init__(
        self, num_blocks: int, *, prefix_caching: bool = True, sink: KVEventSink | None = None
    ) -> None:
        self.num_blocks = num_blocks
        self.sink = sink
        self.prefix_caching = prefix_caching
        self.used = 0  # blocks referenced by at least one running request
        self._refs: dict[Hashable, int] = {}  # hashed blocks in use → reference count
        self._cached: OrderedDict[Hashable, None] = OrderedDict()  # free but reusable, LRU first

    @property
    def free(self) -> int:
        """Blocks that can be handed out now (cached-but-idle blocks count as free)."""
        return self.num_blocks - self.used

    @property
    def usage(self) -> float:
        return self.used / self.num_blocks

    def match_prefix(self, hashes: Sequence[Hashable]) -> int:
        """Number of leading blocks of `hashes` already in the pool (in use or cached)."""
        if not self.prefix_caching:
            return 0
        refs, cached = self._refs, self._cached
        n = 0
        for h in hashes:
            if h in refs or h in cached:
                n += 1
            else:
                break
        return n

    def blocks_needed(self, hashes: Sequence[Hashable], private: int) -> int:
        """New blocks that `acquire(hashes, private)` would take from the free count."""
        if not hashes or not self.prefix_caching:
            return len(hashes) + private
        refs = self._refs
        return sum(1 for h in hashes if h not in refs) + private

    def acquire(self, hashes: Sequence[Hashable], private: int) -> None:
        """Reference the hashed prompt blocks and take `private` plain blocks."""
        if not self.try_acquire(hashes, private):
            need = self.blocks_needed(hashes, private)
            raise RuntimeError(f"KV pool over-committed: need {need}, free {self.free}")

    def try_acquire(self, hashes: Sequence[Hashable], private: int) -> bool:
        """`acquire` if the blocks fit; otherwise take nothing and return False."""
        need = self.blocks_needed(hashes, private)
        if need > self.num_blocks - self.used:
            return False
        if not self.prefix_caching:
            self.used += need
            self._evict_to_fit()
            return True
        refs, cached, sink = self._refs, self._cached, self.sink
        new: list[Hashable] = []
        for h in hashes:
            count = refs.get(h)
            if count is not None:
                refs[h] = count + 1
                continue
            if h in cached:
                del cached[h]
            elif sink is not None:
                new.append(h)
            refs[h] = 1
            self.used += 1
        self.used += private
        if cached:  # evict before storing, as vLLM's allocation does (see `_evict_to_fit`)
            self._evict_to_fit()
        if new and sink is not None:
            sink.stored(new)
        return True

    def grow(self, private: int) -> None:
        """Take more plain blocks for generated tokens."""
        used = self.used + private
        if used > self.num_blocks:
            raise RuntimeError(f"KV pool over-committed: need {private}, free {self.free}")
        self.used = used
        if self._cached:
            self._evict_to_fit()

    def release(self, hashes: Sequence[Hashable], private: int) -> None:
        """Drop a finished or preempted request's blocks; its hashed blocks stay cached."""
        self.used -= private
        if not self.prefix_caching:
            self.used -= len(hashes)
            return
        refs, cached = self._refs, self._cached
        for h in reversed(hashes):  # tail first, so evicted first (module docstring)
            count = refs[h]
            if count > 1:
                refs[h] = count - 1
            else:
                del refs[h]
                self.used -= 1
                cached[h] = None
                cached.move_to_end(h)

    def _evict_to_fit(self) -> None:
        cached = self._cached
        gone: list[Hashable] = []
        while cached and self.used + len(cached) > self.num_blocks:
            gone.append(cached.popitem(last=False)[0])
        if gone and self.sink is not None:
            self.sink.removed(gone)
