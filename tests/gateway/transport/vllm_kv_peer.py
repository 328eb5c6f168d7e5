"""A KV-event publisher written from vLLM's own, for the subscriber's tests.

Written from `ZmqEventPublisher` in vllm-project/vllm `vllm/distributed/kv_events.py`
(v0.11.0; the PUB/ROUTER protocol is the same from v0.9 to today's main): a PUB socket
bound at the endpoint, a ROUTER bound at the replay endpoint, and one thread that, on
each turn, first serves a waiting replay request (`_service_replay`: for a request
`[id, "", start_seq]`, every buffered `(seq, payload)` with `seq >= start_seq` as
`[id, "", seq (8 bytes big-endian), payload]`, then `[id, "", END_SEQ, ""]`, with
`END_SEQ = (-1).to_bytes(8, "big", signed=True)`), then takes the next batch off its
queue (waiting 0.1 s at most), numbers it from 0, sends `[topic, seq, payload]` and
keeps `(seq, payload)` in a deque of `buffer_steps`.

What vLLM does not have, for the tests: `publish(..., deliver=False)` numbers and
buffers a batch without sending it (what the subscriber sees when its SUB socket drops
a message at its high-water mark); while `replay_gate` is clear, replay requests are
received (and counted) but answered only once it is set (a replay that takes its
time); `restart()` starts numbering from 0 again with an empty buffer (the engine
restarted); payloads may be any bytes (a broken publisher).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any

import msgspec
import zmq

from inference_gateway.protocols.vllm.kv_events import (
    BlockStored,
    KVEventBatch,
    encode_batch,
)

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def stored(hashes: list[int], tokens: int | None = None, token: int = 7) -> bytes:
    """A vLLM batch (v0.11's array-like encoding) storing `hashes` (with `tokens`
    token ids, 16 a block unless told)."""
    count = len(hashes) * 16 if tokens is None else tokens
    event = BlockStored(hashes, None, [token] * count, 16, None, "GPU")
    return encode_batch(KVEventBatch(ts=1.0, events=[event], data_parallel_rank=0))


def stored_as_map(hashes: list[int]) -> bytes:
    """The same batch as vLLM's main branch encodes it (its structs are no longer
    `array_like`, so they go out as maps, tagged `type`): what a version skew sends a
    subscriber of v0.11's format."""
    event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
             "token_ids": [7] * 16 * len(hashes), "block_size": 16, "lora_id": None,
             "medium": "GPU", "lora_name": None}  # fmt: skip
    return msgspec.msgpack.encode({"ts": 1.0, "events": [event], "data_parallel_rank": 0})


class VLLMPublisher:
    def __init__(self, endpoint: str, replay_endpoint: str | None, *, buffer_steps: int = 10_000):
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(endpoint)
        self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._replay: zmq.Socket[Any] | None = None
        self.replay_endpoint: str | None = None
        if replay_endpoint is not None:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(replay_endpoint)
            self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        self._queue: queue.Queue[tuple[bytes, bool] | None] = queue.Queue()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._seq = 0
        self.replay_requests = 0
        self._held: list[list[bytes]] = []
        self.replay_gate = threading.Event()
        self.replay_gate.set()
        self._running = True
        self._thread = threading.Thread(target=self._publisher_thread, daemon=True)
        self._thread.start()

    def publish(self, payload: bytes, *, deliver: bool = True) -> None:
        self._queue.put((payload, deliver))

    def restart(self) -> None:
        self._queue.put(None)  # handled in the thread, in order with the batches

    def close(self) -> None:
        self._running = False
        self.replay_gate.set()
        self._thread.join(timeout=2)
        self._ctx.destroy(linger=0)

    def _publisher_thread(self) -> None:
        while self._running:
            replay = self._replay
            if replay is not None:
                while replay.poll(0):
                    self._held.append(replay.recv_multipart())
                    self.replay_requests += 1
                while self._held and self.replay_gate.is_set():
                    self._service_replay(replay, self._held.pop(0))
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is None:
                self._seq = 0
                self._buffer.clear()
                continue
            payload, deliver = item
            seq, self._seq = self._seq, self._seq + 1
            if deliver:
                self._pub.send_multipart((b"kv-events", seq.to_bytes(8, "big"), payload))
            self._buffer.append((seq, payload))

    def _service_replay(self, replay: zmq.Socket[Any], frames: list[bytes]) -> None:
        if len(frames) != 3:
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in self._buffer:
            if seq >= first:
                replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        replay.send_multipart((client, b"", END_SEQ, b""))
