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
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "END_SEQ",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "KVEventBatch",
    "decode_batch",
    "encode_batch",
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
