"""The emulator's KV events, read by a plain ZMQ subscriber written from vLLM's source.

The peer below is transcribed from vllm-project/vllm: the structs from
`vllm/distributed/kv_events.py` (v0.10/v0.11, `array_like=True, omit_defaults=True,
tag=True`), the subscriber loop and replay request from
`examples/online_serving/kv_events_subscriber.py`, and the block hash from
`vllm/v1/core/kv_cache_utils.py` (`hash_block_tokens` with the `sha256` hash function,
`NONE_HASH = sha256(PYTHONHASHSEED)`, `maybe_convert_block_hash` to the low 64 bits).
Nothing here imports the gateway's own wire module, so a drift on either side fails.
"""

from __future__ import annotations

import asyncio
import hashlib
import pickle
import socket
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
import zmq

from inference_gateway.emulator.kv_publisher import parse_kv_events_config
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.errors import ConfigError


# ---- vLLM's structs, transcribed -------------------------------------------------------
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


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


def sha256(value: object) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def vllm_hashes(token_ids: list[int], seed: str, block_size: int = 16) -> list[int]:
    parent = sha256(seed)  # NONE_HASH with PYTHONHASHSEED set
    out = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = sha256((parent, tuple(token_ids[start : start + block_size]), None))
        out.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def receive(sub: zmq.Socket[Any], want: int, timeout_s: float = 10.0) -> list[tuple[int, bytes]]:
    """Up to `want` messages, waiting at most `timeout_s` in all (bounded loop)."""
    got: list[tuple[int, bytes]] = []
    for _ in range(int(timeout_s * 20)):
        if len(got) >= want:
            break
        if sub.poll(50):
            topic, seq, payload = sub.recv_multipart()
            assert topic == b"kv-events"
            got.append((int.from_bytes(seq, "big"), payload))
    return got


async def test_subscriber_decodes_the_pods_batches_and_replays_missed_ones(
    tmp_path: Path,
) -> None:
    """vLLM binds its PUB socket for `tcp://*`, `ipc://` and `inproc://` endpoints and
    connects it otherwise; tests stay off the network with an `ipc://` endpoint (bound,
    as `tcp://*:5557` is) and a loopback replay port."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{tmp_path}/kv-events"
    replay_port = free_port()
    config = parse_kv_events_config(
        '{"enable_kv_cache_events": true, "publisher": "zmq", '
        f'"endpoint": "{endpoint}", '
        f'"replay_endpoint": "tcp://127.0.0.1:{replay_port}", "topic": "kv-events"}}'
    )
    pod = EmulatedPod(
        "pod", pod_profile("H100", "llama-3.1-8b"), port=0, kv_events=config, hash_seed="0"
    )
    await pod.start()
    sub.connect(endpoint)
    sub.setsockopt_string(zmq.SUBSCRIBE, "kv-events")
    replay = ctx.socket(zmq.REQ)
    replay.setsockopt(zmq.LINGER, 0)
    try:
        await asyncio.sleep(0.3)  # ZMQ's slow joiner: let the connection settle
        text = "You are a careful assistant who answers in one line. " * 20
        body = {"model": "llama-3.1-8b", "prompt": text, "max_tokens": 4}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{pod.url}/v1/completions", json=body) as response,
        ):
            assert response.status == 200
        got = await asyncio.to_thread(receive, sub, 1)
        assert got, "no KV event batch arrived"
        seq, payload = got[0]
        batch = msgspec.msgpack.decode(payload, type=KVEventBatch)
        assert batch.data_parallel_rank == 0 and batch.ts > 0
        stored = [e for e in batch.events if isinstance(e, BlockStored)]
        assert stored
        ids = [int.from_bytes(text.encode()[i : i + 4], "big") for i in range(0, 4 * 256, 4)]
        expected = vllm_hashes(ids[: (len(text) // 64) * 16], "0")
        assert stored[0].block_hashes == expected[: len(stored[0].block_hashes)]
        assert sum(len(e.block_hashes) for e in stored) == len(expected)
        assert stored[0].parent_block_hash is None
        assert stored[0].token_ids == ids[: 16 * len(stored[0].block_hashes)]
        assert (stored[0].block_size, stored[0].lora_id, stored[0].medium) == (16, None, "GPU")
        raw = msgspec.msgpack.decode(payload)  # the array shape on the wire
        assert raw[1][0][0] == "BlockStored" and len(raw[1][0]) == 7 and len(raw) == 3

        # a subscriber that missed everything asks the ROUTER for it from sequence 0
        replay.connect(f"tcp://127.0.0.1:{replay_port}")
        replay.send((0).to_bytes(8, "big"))
        replayed = []
        for _ in range(100):
            if not await asyncio.to_thread(replay.poll, 100):
                continue
            seq_bytes, data = replay.recv_multipart()
            if not data:
                assert int.from_bytes(seq_bytes, "big", signed=True) == -1
                break
            replayed.append((int.from_bytes(seq_bytes, "big"), data))
        assert replayed[0] == (0, got[0][1]) if seq == 0 else replayed
    finally:
        await pod.stop()
        replay.close()
        sub.close()
        ctx.term()


def test_pool_reports_evictions_as_removed_blocks() -> None:
    """vLLM evicts while it allocates (`BlockPool.get_new_blocks` →
    `_maybe_evict_cached_block`, BlockRemoved) and stores after the step
    (`cache_full_blocks`, BlockStored) (vllm-project/vllm `vllm/v1/core/block_pool.py`):
    removals come first."""
    from inference_gateway.emulator.kvcache import BlockPool

    seen: list[tuple[str, list[Any]]] = []

    class Sink:
        def stored(self, hashes: list[Any]) -> None:
            seen.append(("stored", hashes))

        def removed(self, hashes: list[Any]) -> None:
            seen.append(("removed", hashes))

    pool = BlockPool(4, sink=Sink())
    pool.acquire([1, 2, 3], 0)
    pool.release([1, 2, 3], 0)
    pool.acquire([1, 2], 0)  # cached: no new event
    pool.acquire([7, 8], 0)  # needs room: block 3 is evicted
    assert seen == [("stored", [1, 2, 3]), ("removed", [3]), ("stored", [7, 8])]


def test_an_index_fed_by_a_full_pool_keeps_every_block_the_pool_holds() -> None:
    """Issue 24: with stores before removals the index briefly held more than the pod's
    capacity and trimmed its oldest entries, the head of a context the pod still held
    (a cached context then scored as a miss). In vLLM's order it never overflows."""
    from inference_gateway.core.scheduling.kv_index import KVBlockIndex
    from inference_gateway.emulator.kvcache import BlockPool

    index = KVBlockIndex()
    index.set_capacity("p", 8)

    class Sink:
        def stored(self, hashes: list[Any]) -> None:
            index.stored("p", hashes)

        def removed(self, hashes: list[Any]) -> None:
            index.removed("p", hashes)

    pool = BlockPool(8, sink=Sink())
    old, hot = [1, 2, 3, 4], [11, 12, 13, 14]
    for chain in (hot, old):  # `hot` is the index's oldest entry
        pool.acquire(chain, 0)
        pool.release(chain, 0)
    pool.acquire(hot, 0)  # a hit (no event): now `old` is the pool's least recently used
    pool.release(hot, 0)
    pool.acquire([21, 22, 23, 24], 0)  # evicts `old`, the pool's least recently used
    assert pool.match_prefix(hot) == 4
    assert index.matches(hot) == {"p": 4}
    assert index.matches(old) == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [("{", "<json>"), ('{"enable_kv_cache_events": true, "bogus": 1}', "bogus"),
     ('{"publisher": "kafka"}', "publisher")],
)  # fmt: skip
def test_bad_flag_values_name_the_field(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_kv_events_config(value)
    assert problem in " ".join(error.value.problems)
