"""The KV-event codec against bytes written out by hand from vLLM's structs.

Layout from vllm-project/vllm v0.11.0 `vllm/distributed/kv_events.py` (the release the
tree pins): `EventBatch(ts, events, data_parallel_rank=None)` and the tagged events
`BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium)`,
`BlockRemoved(block_hashes, medium)`, `AllBlocksCleared()`, all msgspec structs with
`array_like=True, omit_defaults=True` (events `tag=True`: the class name first). The
same structs without `medium` and `data_parallel_rank` are at b4e69e0 (before v0.11.0);
after it (0181ea3) vLLM dropped `array_like`, which this codec does not read (the
subscriber counts such a payload as bad). Each vector is the msgpack encoding (its
spec, not msgspec) of one batch, written here byte by byte, so the codec is checked
against the format and not against itself.
"""

from __future__ import annotations

import msgspec
import pytest

from inference_gateway.protocols.vllm.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    decode_batch,
    decode_event,
    decode_hashes,
    decode_view,
    encode_batch,
    event_views,
    leading_ints,
)

BIG = 2**63 + 5  # a low-64-bit block hash above int64: msgpack uint64 (0xcf)

STORED = (
    b"\x97"  # array of 7: tag and six fields
    + b"\xabBlockStored"
    + b"\x91\xcf" + BIG.to_bytes(8, "big")  # block_hashes
    + b"\xc0"  # parent_block_hash: nil
    + b"\x92\x01\x02"  # token_ids
    + b"\x02"  # block_size
    + b"\xc0"  # lora_id: nil (no default, so never omitted)
    + b"\xa3GPU"  # medium
)  # fmt: skip
REMOVED = b"\x93\xacBlockRemoved\x91\x07\xa3GPU"
CLEARED = b"\x91\xb0AllBlocksCleared"
TS = b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00"  # 1.5 as float64

VECTORS = [
    (  # a rank: three fields
        b"\x93" + TS + b"\x93" + STORED + REMOVED + CLEARED + b"\x00",
        KVEventBatch(
            ts=1.5,
            events=[
                BlockStored([BIG], None, [1, 2], 2, None, "GPU"),
                BlockRemoved([7], "GPU"),
                AllBlocksCleared(),
            ],
            data_parallel_rank=0,
        ),
    ),
    (  # no rank: still written (msgspec omits no field of an array_like struct)
        b"\x93" + TS + b"\x91" + REMOVED + b"\xc0",
        KVEventBatch(ts=1.5, events=[BlockRemoved([7], "GPU")]),
    ),
]


@pytest.mark.parametrize(("wire", "batch"), VECTORS)
def test_a_batch_encodes_to_vllms_bytes(wire: bytes, batch: KVEventBatch) -> None:
    assert encode_batch(batch) == wire


@pytest.mark.parametrize(("wire", "batch"), VECTORS)
def test_vllms_bytes_decode_whole_and_lazily(wire: bytes, batch: KVEventBatch) -> None:
    assert decode_batch(wire) == batch
    view = decode_view(memoryview(wire))
    assert (view.ts, view.data_parallel_rank) == (batch.ts, batch.data_parallel_rank)
    events = [decode_event(raw) for raw in event_views(view)]
    assert [type(e).__name__.removesuffix("View") for e in events] == [
        type(e).__name__ for e in batch.events
    ]
    for lazy, whole in zip(events, batch.events, strict=True):
        if isinstance(whole, BlockStored | BlockRemoved):
            assert not isinstance(lazy, AllBlocksCleared)
            assert list(decode_hashes(lazy.block_hashes)) == whole.block_hashes
        if isinstance(whole, BlockStored):
            assert hasattr(lazy, "token_ids")
            assert leading_ints(lazy.token_ids, 2) == whole.token_ids


def test_a_batch_without_the_rank_field_decodes() -> None:
    """Before the rank was added (b4e69e0) a batch had two fields; the default fills in."""
    wire = b"\x92" + TS + b"\x91" + CLEARED
    assert decode_batch(wire) == KVEventBatch(ts=1.5, events=[AllBlocksCleared()])
    assert decode_view(wire).data_parallel_rank is None


def test_a_map_encoded_batch_is_not_read() -> None:
    """vLLM after v0.11.0 sends structs as maps; reading one as arrays would misplace
    every field, so it fails to decode instead."""
    as_map = msgspec.msgpack.encode({"ts": 1.5, "events": [], "data_parallel_rank": 0})
    with pytest.raises(msgspec.DecodeError):
        decode_batch(as_map)
    with pytest.raises(msgspec.DecodeError):
        decode_view(as_map)
