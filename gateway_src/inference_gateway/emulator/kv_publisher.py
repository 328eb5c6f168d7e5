"""The emulator's KV events, published as vLLM publishes them (`--kv-events-config`).

`KVEventsConfig` takes vLLM's own keys (vllm-project/vllm `vllm/config/kv_events.py`):
`enable_kv_cache_events`, `publisher` ("null" | "zmq"; default "zmq" when events are
enabled), `endpoint` (default `tcp://*:5557`), `replay_endpoint`, `buffer_steps`, `hwm`,
`max_queue_size`, `topic`. The publisher follows `ZmqEventPublisher` of
`vllm/distributed/kv_events.py`:

* a PUB socket that *binds* when the endpoint has `*`, `::`, `ipc://` or `inproc://`
  and *connects* otherwise (vLLM's "bind stable, connect volatile" heuristic), with the
  high-water mark `hwm`;
* a thread that sends each batch as `[topic, seq (8 bytes big-endian), payload]`,
  numbering batches from 0 and keeping the last `buffer_steps` for replay;
* an optional ROUTER socket on `replay_endpoint`: a request `[id, "", start_seq]` is
  answered with `[id, "", seq, payload]` for each buffered batch from `start_seq`, then
  `[id, "", -1, ""]`.

The block pool calls `stored` / `removed` as it caches and evicts (`kvcache.KVEventSink`);
events collect between the thread's ticks (`flush_interval_s`, a few ms, as vLLM sends
one batch per engine step) and go out as one `KVEventBatch`. `BlockStored` needs each
block's parent hash and token ids, which the pool does not keep: the server registers
them per request (`register`) in a map bounded to twice the pool's blocks.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import zmq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference_gateway.config.spec import format_validation_error
from inference_gateway.errors import ConfigError
from inference_gateway.protocols.vllm.kv_events import (
    END_SEQ,
    MEDIUM_GPU,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)

__all__ = [
    "KVEventsConfig",
    "ZmqKVPublisher",
    "offset_endpoint",
    "parse_kv_events_config",
    "subscriber_address",
]


class KVEventsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enable_kv_cache_events: bool = False
    publisher: Literal["null", "zmq"] | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = Field(default=10_000, ge=1)
    hwm: int = Field(default=100_000, ge=0)
    max_queue_size: int = Field(default=100_000, ge=1)
    topic: str = ""

    @property
    def publishes(self) -> bool:
        publisher = self.publisher or ("zmq" if self.enable_kv_cache_events else "null")
        return self.enable_kv_cache_events and publisher == "zmq"


def parse_kv_events_config(
    value: str | dict[str, Any], source: str = "--kv-events-config"
) -> KVEventsConfig:
    """vLLM's flag value (a JSON object) or a fleet file's mapping; errors name the field."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as error:
            raise ConfigError(source, [f"<json>: {error}"]) from None
    if not isinstance(value, dict):
        raise ConfigError(source, ["<root>: expected a JSON object"])
    try:
        return KVEventsConfig.model_validate(value)
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error)) from None


def offset_endpoint(endpoint: str | None, offset: int) -> str | None:
    """vLLM's `offset_endpoint_port` (per data-parallel rank), used here per replica of
    a fleet group: a TCP port moves up by `offset`, other endpoints get `_dp{offset}`."""
    if not endpoint or offset == 0:
        return endpoint
    if endpoint.startswith("tcp://") and ":" in endpoint[6:]:
        base, _, port = endpoint.rpartition(":")
        return f"{base}:{int(port) + offset}"
    return f"{endpoint}_dp{offset}"


def subscriber_address(endpoint: str, host: str) -> str | None:
    """Where a subscriber connects to a publisher bound at `endpoint` (None: the
    publisher connects out, so the subscriber binds and nobody needs its address)."""
    if not _binds(endpoint):
        return None
    if endpoint.startswith("tcp://"):
        return f"tcp://{host}:{endpoint.rpartition(':')[2]}"
    return endpoint


def _binds(endpoint: str) -> bool:
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class ZmqKVPublisher:
    """One pod's publisher (see the module docstring); `close()` stops it."""

    def __init__(
        self,
        config: KVEventsConfig,
        *,
        block_size: int,
        capacity_blocks: int,
        flush_interval_s: float = 0.005,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        self.config = config
        self.block_size = block_size
        self.flush_interval_s = flush_interval_s
        # block → (parent, token ids, LoRA int id) until the pool reports it stored
        self._info: OrderedDict[Hashable, tuple[int | None, tuple[int, ...], int | None]] = (
            OrderedDict()
        )
        self._info_cap = max(1024, 2 * capacity_blocks)
        self._pending: deque[BlockStored | BlockRemoved] = deque()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._topic = config.topic.encode()
        self._seq = 0
        self._ctx = context or zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._replay: zmq.Socket[Any] | None = None
        try:
            if _binds(config.endpoint):
                self._pub.bind(config.endpoint)
            else:
                self._pub.connect(config.endpoint)
            if config.replay_endpoint:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                self._replay.bind(config.replay_endpoint)
        except zmq.ZMQError as error:
            self._close_sockets()
            raise OSError(f"KV events endpoint {config.endpoint}: {error}") from None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The PUB socket's address (the bound one, port 0 resolved)."""
        last = self._pub.getsockopt(zmq.LAST_ENDPOINT)
        return last.decode() if isinstance(last, bytes) and last else self.config.endpoint

    @property
    def replay_address(self) -> str | None:
        if self._replay is None:
            return None
        last = self._replay.getsockopt(zmq.LAST_ENDPOINT)
        return last.decode() if isinstance(last, bytes) else None

    # ------------------------------------------------------------------ engine side

    def register(
        self, hashes: Sequence[Hashable], token_ids: Sequence[int], lora_id: int | None = None
    ) -> None:
        """Remember each block's parent, tokens and adapter until the pool reports it stored."""
        info, size = self._info, self.block_size
        parent: int | None = None
        for i, h in enumerate(hashes):
            if h not in info:
                info[h] = (parent, tuple(token_ids[i * size : (i + 1) * size]), lora_id)
            parent = h  # type: ignore[assignment]  # the pool's keys are the int hashes
        while len(info) > self._info_cap:
            info.popitem(last=False)

    def stored(self, hashes: list[Hashable]) -> None:
        info = self._info
        run: list[int] = []
        tokens: list[int] = []
        parent: int | None = None
        lora_id: int | None = None
        for h in hashes:
            parent_h, ids, lora = info.pop(h, (None, (), None))
            if run and parent_h != run[-1]:  # not a continuation: a new event
                self._store(run, parent, tokens, lora_id)
                run, tokens = [], []
            if not run:
                parent, lora_id = parent_h, lora
            run.append(h)  # type: ignore[arg-type]
            tokens.extend(ids)
        if run:
            self._store(run, parent, tokens, lora_id)

    def _store(
        self, run: list[int], parent: int | None, tokens: list[int], lora_id: int | None
    ) -> None:
        self._pending.append(
            BlockStored(
                block_hashes=run,
                parent_block_hash=parent,
                token_ids=tokens,
                block_size=self.block_size,
                lora_id=lora_id,  # vLLM: `request.lora_request.id` (the adapter's int id)
                medium=MEDIUM_GPU,
            )
        )

    def removed(self, hashes: list[Hashable]) -> None:
        self._pending.append(BlockRemoved(block_hashes=list(hashes), medium=MEDIUM_GPU))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        poller = zmq.Poller()
        if self._replay is not None:
            poller.register(self._replay, zmq.POLLIN)
        while not self._stop.is_set():
            if self._replay is not None:
                if poller.poll(int(self.flush_interval_s * 1000)):
                    with contextlib.suppress(zmq.ZMQError, ValueError):
                        self._serve_replay()
            else:
                self._stop.wait(self.flush_interval_s)
            self._flush()
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        events: list[BlockStored | BlockRemoved] = []
        while pending and len(events) < self.config.max_queue_size:
            events.append(pending.popleft())
        batch = KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0)  # type: ignore[arg-type]
        payload = encode_batch(batch)
        seq = self._seq
        self._seq += 1
        with contextlib.suppress(zmq.ZMQError):
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
        self._buffer.append((seq, payload))

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart(zmq.NOBLOCK)
        if len(frames) != 3:
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= first:
                self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", END_SEQ, b""))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._close_sockets()

    def _close_sockets(self) -> None:
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
