"""bench/kv_events.py compares the shipped KV index with the one it replaced, loaded from
git: that old source must still load (its imports mapped to where the codec lives now:
the codec's move to protocols/vllm/ broke it once, unnoticed, since `make bench` is not
in CI), and both indexes must ingest the decode-shaped batches the bench times."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import kv_events

from inference_gateway.protocols.vllm.kv_events import decode_view


def test_the_old_index_loads_from_git_and_both_ingest_decode_shaped_batches() -> None:
    made = kv_events.indexes()
    assert set(made) == {"new", "old"}, "the old index did not load from git"
    per_pod = 5 * 20  # 40 batches over 8 pods, 20 stores each (under the 256 held)
    wire = kv_events.decode_payloads(40)
    for name, make in made.items():
        index = make()
        for seq, payload in enumerate(wire):
            for _ in index.ingest_view(f"pod-{seq % kv_events.PODS}", decode_view(payload)):
                pass
        assert all(index.blocks(f"pod-{p}") == per_pod for p in range(kv_events.PODS)), name
