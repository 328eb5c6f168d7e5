"""The fleet's (block hash, holder) pairs: a set, whatever hashes a publisher picks."""

from __future__ import annotations

import random
from array import array

from inference_gateway.core.scheduling.block_pairs import LOAD, LOST, MASK64, BlockPairs


def test_pairs_behave_as_a_set_through_many_bucket_splits() -> None:
    """Random stores and evictions against a Python set of pairs: the same answers,
    a block's last holder leaving it lost, and the buckets split as the pairs grow (a
    few thousand pairs: dozens of splits)."""
    rnd, pairs, model = random.Random(3), BlockPairs(seed=1), set()
    hashes = [rnd.getrandbits(64) for _ in range(3000)]
    for step in range(12_000):
        batch, holder = rnd.sample(hashes, 3), rnd.randrange(1, 5)
        log, lost = array("Q"), array("Q")
        if step % 3 == 2:
            held = [h for h in batch if (h, holder) in model]
            gone = [h for h in held if not any((h, o) in model for o in range(1, 5) if o != holder)]
            assert pairs.evict(batch, holder, lost) == (len(held), len(gone))
            assert list(lost) == gone
            model -= {(h, holder) for h in held}
            model |= {(h, LOST) for h in gone}
        else:
            new = [h for h in batch if (h, holder) not in model]
            was_lost = [h for h in new if (h, LOST) in model]
            assert pairs.store(batch, holder, log) == (len(new), len(was_lost))
            assert list(log) == new
            model |= {(h, holder) for h in new}
            model -= {(h, LOST) for h in was_lost}
    assert pairs.size == len(model) and len(pairs._keys) > 16
    assert pairs.size <= LOAD * len(pairs._keys)
    for h in hashes[:500]:
        assert sorted(pairs.holders(h)) == sorted(o for o in range(5) if (h, o) in model)
        assert all(pairs.has(h, o) == ((h, o) in model) for o in range(5))


def test_hashes_are_taken_modulo_2_64_on_every_path() -> None:
    """msgpack ints span -2**63..2**64-1 and a hostile one may be anything Python holds:
    nothing raises, and a hash and its residue are one block."""
    pairs = BlockPairs(seed=2)
    assert pairs.add(-1, 1) and not pairs.add(MASK64, 1)
    assert pairs.add(1 << 200, 2) and pairs.has(0, 2) and pairs.holders(MASK64) == [1]
    assert pairs.discard(-1, 1) and not pairs.discard(-1, 1) and pairs.size == 1


def test_chosen_hashes_spread_over_buckets() -> None:
    """Consecutive (or otherwise chosen) hashes land in many buckets: the keyed mix."""
    pairs = BlockPairs(seed=4)
    for h in range(0, 64 * LOAD):
        pairs.add(h << 20, 1)
    sizes = [len(k) for k in pairs._keys]
    assert max(sizes) < 4 * LOAD and len(sizes) >= 64
