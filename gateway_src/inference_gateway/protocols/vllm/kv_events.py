"""vLLM's KV-cache events on the wire: the structs, and their msgpack encoding.

A vLLM pod started with `--kv-events-config '{"enable_kv_cache_events": true,
"publisher": "zmq", ...}'` publishes, after each engine step that changed its prefix
cache, one ZMQ multipart message `[topic, sequence (8 bytes, big-endian), payload]` on a
PUB socket; the payload is a msgpack `KVEventBatch`. Encoded with msgspec as
`array_like=True, omit_defaults=True, tag=True` structs, so field order is the wire
order and every event is an array that starts with its tag:

    [ts, [["BlockStored", [hash, ...], parent | nil, [token, ...], block_size, lora_id,
           medium], ["BlockRemoved", [hash, ...], medium], ["AllBlocksCleared"]],
     data_parallel_rank]

Transcribed (field names, order, defaults and struct options) from vllm-project/vllm
`vllm/distributed/kv_events.py` (the array_like structs of the v0.10/v0.11 releases,
which `examples/online_serving/kv_events_subscriber.py` decodes), block hashes as
`ExternalBlockHash` ints: the low 64 bits of the engine's hash
(`kv_cache_utils.maybe_convert_block_hash`, `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, on
by default). SGLang's publisher (`sglang/srt/disaggregation/kv_events.py`) sends the
same tags and fields (its batch's third field is `attn_dp_rank`), so one decoder reads
both. A replay ROUTER socket answers `[identity, "", start_seq]` with
`[identity, "", seq, payload]` for every buffered batch from `start_seq` on, then
`[identity, "", -1 (signed), ""]`.

Two ways to read a payload. `decode_batch` decodes all of it (the simulator, tests,
benchmarks). The live picker reads what it cannot trust lazily (`decode_view`): the
batch's events stay one undecoded msgpack slice until split (`event_views`), each event
is decoded on its own when applied (`decode_event`), its block hashes only once their
count (`hash_count`, read from the array header) is known to fit, and its token ids
never whole: the index reads one block's worth (`leading_ints`), and only to say why a
pod's events do not match the picker's hashes. So a payload costs memory in proportion to what
the index will keep, not to what a publisher chose to send
(`kv_index.KVBlockIndex.ingest_view`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = [
    "END_SEQ",
    "AllBlocksCleared",
    "BatchView",
    "BlockRemoved",
    "BlockRemovedView",
    "BlockStored",
    "BlockStoredView",
    "KVEventBatch",
    "array_length",
    "decode_batch",
    "decode_event",
    "decode_hashes",
    "decode_view",
    "encode_batch",
    "event_views",
    "hash_count",
    "leading_ints",
]

END_SEQ = (-1).to_bytes(8, "big", signed=True)  # the replay socket's end marker
MEDIUM_GPU = "GPU"


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base of the tagged union (the tag is the class name)."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(type=KVEventBatch)


def encode_batch(batch: KVEventBatch) -> bytes:
    return _ENCODER.encode(batch)


def decode_batch(payload: bytes) -> KVEventBatch:
    """The batch in `payload`; `msgspec.DecodeError` (a `ValueError`) when it is not one."""
    return _DECODER.decode(payload)


# ---------------------------------------------------------------------- lazy reading


class BatchView(msgspec.Struct, array_like=True, gc=False):
    """A `KVEventBatch` whose events are still one msgpack array, undecoded."""

    ts: float
    events: msgspec.Raw
    data_parallel_rank: int | None = None


class BlockStoredView(KVCacheEvent, tag="BlockStored"):
    """`BlockStored` with its hashes undecoded and its token ids never decoded."""

    block_hashes: msgspec.Raw
    parent_block_hash: int | None
    token_ids: msgspec.Raw
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemovedView(KVCacheEvent, tag="BlockRemoved"):
    block_hashes: msgspec.Raw
    medium: str | None


EventView = BlockStoredView | BlockRemovedView | AllBlocksCleared

_VIEW = msgspec.msgpack.Decoder(type=BatchView)
_EVENTS = msgspec.msgpack.Decoder(type=list[msgspec.Raw])
_EVENT: msgspec.msgpack.Decoder[EventView] = msgspec.msgpack.Decoder(type=EventView)
_HASHES = msgspec.msgpack.Decoder(type=list[int])


def decode_view(payload: bytes | memoryview) -> BatchView:
    """The batch in `payload`, its events left undecoded; `msgspec.DecodeError` when
    `payload` is not a batch. A memoryview (a ZMQ frame's, uncopied) is read in place."""
    return _VIEW.decode(payload)


def array_length(raw: msgspec.Raw) -> int:
    """The element count of the msgpack array in `raw`, from its header alone."""
    head = memoryview(raw)[:5]
    kind = head[0] if head else 0
    if 0x90 <= kind <= 0x9F:  # fixarray
        return kind & 0x0F
    if kind == 0xDC and len(head) >= 3:  # array 16
        return int.from_bytes(head[1:3], "big")
    if kind == 0xDD and len(head) >= 5:  # array 32
        return int.from_bytes(head[1:5], "big")
    raise msgspec.DecodeError("expected a msgpack array")


def event_views(view: BatchView) -> list[msgspec.Raw]:
    """The batch's events, each still undecoded (`decode_event`)."""
    return _EVENTS.decode(view.events)


def decode_event(raw: msgspec.Raw) -> EventView:
    return _EVENT.decode(raw)


def hash_count(hashes: Sequence[int] | msgspec.Raw) -> int:
    return array_length(hashes) if isinstance(hashes, msgspec.Raw) else len(hashes)


def decode_hashes(hashes: Sequence[int] | msgspec.Raw) -> Sequence[int]:
    return _HASHES.decode(hashes) if isinstance(hashes, msgspec.Raw) else hashes


# msgpack's int markers (after fixints): uint8..uint64 0xcc-0xcf, int8..int64 0xd0-0xd3
_INT_WIDTHS = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}


def leading_ints(values: Sequence[int] | msgspec.Raw, n: int) -> list[int] | None:
    """The first `n` ints of a msgpack int array (None when it holds fewer, or another
    value comes first), read without decoding the rest: a publisher's array of token ids
    costs what is read, not what was sent."""
    if not isinstance(values, msgspec.Raw):
        return list(values[:n]) if len(values) >= n else None
    try:
        if array_length(values) < n:
            return None
    except msgspec.DecodeError:
        return None
    data = memoryview(values)
    at = 1 + {0xDC: 2, 0xDD: 4}.get(data[0], 0)  # past the array header
    out: list[int] = []
    for _ in range(n):
        if at >= len(data):
            return None
        kind = data[at]
        if kind <= 0x7F or kind >= 0xE0:  # positive and negative fixints
            out.append(kind if kind <= 0x7F else kind - 0x100)
            at += 1
            continue
        width = _INT_WIDTHS.get(kind)
        if width is None or at + 1 + width > len(data):
            return None
        out.append(int.from_bytes(data[at + 1 : at + 1 + width], "big", signed=kind >= 0xD0))
        at += 1 + width
    return out
