"""The fleet's (block hash, holder) pairs in machine-word arrays: 12 bytes a pair.

Why not a dict: a dict keyed by block hash costs a Python int object (40 bytes for a
64-bit hash) and a hash-table slot (30-60 bytes) per block before the holders; one per
pod (as the KV index had) cost about 190 bytes per cached block per pod (tracemalloc,
`bench/kv_events.py`; 9.4 MiB a full H100 pod with its lost blocks), gigabytes for
1,000 full pods. Here a pair is the block's hash (8 bytes in an `array('Q')`) and its
holder's small id (4 bytes in an `array('I')`), kept sorted by hash inside buckets, so
a block's holders sit side by side and one bisect finds them all.

Buckets are picked by a keyed mix of the hash (a random odd multiplier per process):
a publisher choosing its hashes cannot pile them into one bucket, whose inserts would
then move megabytes each. The buckets split one at a time as the pairs grow (linear
hashing), so growing never stops the event loop to rehash everything; they do not
merge back (an empty bucket is two empty arrays, about 1 byte per pair at the peak).

Hashes are taken modulo 2**64 (msgpack ints span -2**63..2**64-1): both the events'
hashes and the picker's own pass through the same mask, so they still meet.
"""

from __future__ import annotations

import itertools
import random
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence

__all__ = ["LOST", "MASK64", "BlockPairs"]

MASK64 = (1 << 64) - 1
LOAD = 128  # mean pairs per bucket before the next bucket splits
FIRST_LEVEL = 4  # 16 buckets to start with
LEADING_CHUNK = 64  # prompt blocks whose buckets `leading` works out at once
LOST = 0  # the holder id of a block the fleet lost: its last holder evicted it


class BlockPairs:
    """A set of (hash, holder id) pairs; ids are the caller's (`kv_index` interns pods)."""

    __slots__ = ("_ids", "_keys", "_level", "_mult", "_split", "size")

    def __init__(self, seed: int | None = None) -> None:
        self._mult = random.Random(seed).getrandbits(64) | 1
        self._level = FIRST_LEVEL
        self._split = 0  # buckets below this one are split at `_level + 1` bits
        self._keys = [array("Q") for _ in range(1 << FIRST_LEVEL)]
        self._ids = [array("I") for _ in range(1 << FIRST_LEVEL)]
        self.size = 0

    def _mixes(self, hashes: Iterable[int]) -> list[int]:
        """The keyed mix of each hash (modulo 2**64): its low bits pick the bucket."""
        mult = self._mult  # (x ^ x >> 32: the low bits depend on every bit of the hash)
        return [(x := ((h & MASK64) * mult) & MASK64) ^ (x >> 32) for h in hashes]

    def _buckets(self, hashes: Iterable[int]) -> list[int]:
        """Each hash's bucket, a batch at a time (one loop: the event and decision paths'
        cost is mostly this and the bisects)."""
        low, split = (1 << self._level) - 1, self._split
        high = 2 * low + 1
        return [b if (b := x & low) >= split else x & high for x in self._mixes(hashes)]

    def _bucket(self, h: int) -> int:
        return self._buckets((h,))[0]

    def add(self, h: int, holder: int) -> bool:
        """Add the pair; False when it was there already."""
        log: array[int] = array("Q")
        return self.store((h,), holder, log)[0] == 1

    def store(self, hashes: Iterable[int], holder: int, log: array[int]) -> tuple[int, int]:
        """Add (h, holder) for each hash it lacks, appending those hashes to `log`; a
        block the fleet had lost (its one pair is (h, LOST)) becomes the holder's in
        place. Returns (pairs gained by the holder, of which lost before)."""
        added = found = 0
        keys_of, ids_of = self._keys, self._ids
        words = [h & MASK64 for h in hashes]
        for h, b in zip(words, self._buckets(words), strict=True):
            keys, ids = keys_of[b], ids_of[b]
            i, n, lost_at = bisect_left(keys, h), len(keys), -1
            while i < n and keys[i] == h:
                other = ids[i]
                if other == holder:
                    break
                if other == LOST:
                    lost_at = i
                i += 1
            else:
                added += 1
                log.append(h)
                if lost_at >= 0:
                    ids[lost_at] = holder
                    found += 1
                    continue
                keys.insert(i, h)
                ids.insert(i, holder)
                self.size += 1
        while self.size > LOAD * len(keys_of):  # after the batch: its buckets stay put
            self._split_one()
        return added, found

    def evict(self, hashes: Iterable[int], holder: int, lost: array[int]) -> tuple[int, int]:
        """Drop (h, holder) for each hash; a block left with no holder becomes (h, LOST)
        in place, its hash appended to `lost`. Returns (pairs dropped, of which lost)."""
        dropped = became = 0
        keys_of, ids_of = self._keys, self._ids
        words = [h & MASK64 for h in hashes]
        for h, b in zip(words, self._buckets(words), strict=True):
            keys, ids = keys_of[b], ids_of[b]
            start = i = bisect_left(keys, h)
            n = len(keys)
            while i < n and keys[i] == h:
                if ids[i] == holder:
                    dropped += 1
                    if (i == start or keys[i - 1] != h) and (i + 1 == n or keys[i + 1] != h):
                        ids[i] = LOST  # its last holder: the fleet lost it
                        lost.append(h)
                        became += 1
                    else:
                        del keys[i]
                        del ids[i]
                        self.size -= 1
                    break
                i += 1
        return dropped, became

    def _find(self, h: int, holder: int) -> tuple[array[int], array[int], int]:
        """The pair's bucket (keys, ids) and place in it (-1: not there)."""
        h &= MASK64
        b = self._bucket(h)
        keys, ids = self._keys[b], self._ids[b]
        i, n = bisect_left(keys, h), len(keys)
        while i < n and keys[i] == h:
            if ids[i] == holder:
                return keys, ids, i
            i += 1
        return keys, ids, -1

    def discard(self, h: int, holder: int) -> bool:
        """Drop the pair (it is not remembered as lost); False when it was not there."""
        keys, ids, i = self._find(h, holder)
        if i < 0:
            return False
        del keys[i]
        del ids[i]
        self.size -= 1
        return True

    def has(self, h: int, holder: int) -> bool:
        return self._find(h, holder)[2] >= 0

    def nbytes(self) -> int:
        """Bytes the pairs take: every bucket's two arrays (their allocated buffers, the
        slack of their growth included) and the two lists of buckets."""
        lists = sys.getsizeof(self._keys) + sys.getsizeof(self._ids)
        return lists + sum(map(sys.getsizeof, itertools.chain(self._keys, self._ids)))

    def holders(self, h: int) -> list[int]:
        """The ids holding `h` (empty when none)."""
        h &= MASK64
        b = self._bucket(h)
        keys, ids = self._keys[b], self._ids[b]
        i, n = bisect_left(keys, h), len(keys)
        out = []
        while i < n and keys[i] == h:
            out.append(ids[i])
            i += 1
        return out

    def leading(self, hashes: Sequence[int]) -> dict[int, int]:
        """Per holder (the lost blocks' aside), how many of `hashes` it holds in a row
        from the first; holders of none are absent. The decision path's one call."""
        out: dict[int, int] = {}
        if not hashes:
            return out
        alive = set(self.holders(hashes[0]))
        alive.discard(LOST)
        keys_of, ids_of, buckets = self._keys, self._ids, self._buckets
        chunk: list[int] = []
        for i in range(1, len(hashes)):
            if not alive:
                return out
            if (i - 1) % LEADING_CHUNK == 0:  # buckets a chunk at a time: runs end early
                chunk = buckets(hashes[i : i + LEADING_CHUNK])
            h = hashes[i] & MASK64
            b = chunk[(i - 1) % LEADING_CHUNK]
            keys, ids = keys_of[b], ids_of[b]
            j, n = bisect_left(keys, h), len(keys)
            if len(alive) == 1:  # the usual run: one pod holds the chain
                (only,) = alive
                while j < n and keys[j] == h and ids[j] != only:
                    j += 1
                if j < n and keys[j] == h:
                    continue
                out[only] = i
                return out
            kept = set()
            while j < n and keys[j] == h:
                if ids[j] in alive:
                    kept.add(ids[j])
                j += 1
            if len(kept) != len(alive):
                for holder in alive - kept:
                    out[holder] = i
                alive = kept
        for holder in alive:
            out[holder] = len(hashes)
        return out

    def _split_one(self) -> None:
        """Split bucket `_split` by the next bit of the mix (linear hashing)."""
        s, level = self._split, self._level
        mask = (2 << level) - 1
        keys, ids = self._keys[s], self._ids[s]
        stay_k, stay_i, move_k, move_i = array("Q"), array("I"), array("Q"), array("I")
        for h, holder, x in zip(keys, ids, self._mixes(keys), strict=True):
            if x & mask == s:
                stay_k.append(h)
                stay_i.append(holder)
            else:
                move_k.append(h)
                move_i.append(holder)
        self._keys[s], self._ids[s] = stay_k, stay_i
        self._keys.append(move_k)  # bucket s + 2**level: sorted still (a filter keeps order)
        self._ids.append(move_i)
        self._split += 1
        if self._split == 1 << level:
            self._level, self._split = level + 1, 0
