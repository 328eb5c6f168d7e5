"""The picker's side of the pods' KV events: one ZMQ SUB socket per pod, into the index.

For every endpoint of the store the subscriber connects a SUB socket to the pod's
publisher (label `igw.dev/kv-events` with the full endpoint, such as
`tcp://10.0.3.7:5557`, else `tcp://ADDRESS:events_port` from the scorer's parameters),
subscribes to every topic, decodes each `[topic, seq, payload]` message
(`scheduling.kv_events`) and applies it to the scheduler's `KVBlockIndex`. Sockets
follow the store: a new pod is subscribed at the next sync, a pod that left is
unsubscribed and forgotten.

Sequence numbers are watched per pod. A gap (messages the SUB socket dropped at its
high-water mark, or lost over a reconnect) is asked of the pod's replay ROUTER when the
pod names one (label `igw.dev/kv-events-replay`), as vLLM's example subscriber does; a
gap that cannot be replayed is counted, and the index keeps what it has (later events
correct it, and the capacity bound evicts what was never removed). A sequence that goes
back means the engine restarted with an empty cache: the pod's blocks are cleared.
A payload that does not decode is counted and dropped: a pod cannot make the picker
fail. Only a picker with a `precise-prefix-cache-scorer` subscribes at all.

Every replica of the picker subscribes on its own: the index is derived from the pods'
own truth, so replicas agree without sharing it through the store (which would cost a
store write per cached block and a round trip on the picking path); they share only
the dispatch counts they already share (`scheduling.shared_view`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, cast

import msgspec
import zmq
import zmq.asyncio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from inference_gateway.core.scheduling.kv_events import decode_batch
from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.plugins.precise_prefix import PrecisePrefixScorer
from inference_gateway.core.scheduling.types import Endpoint

__all__ = ["REPLAY_LABEL", "KVEventSubscriber", "KVEventsCollector", "subscribe_pods"]

log = logging.getLogger(__name__)

REPLAY_LABEL = "igw.dev/kv-events-replay"
SYNC_INTERVAL_S = 1.0
REPLAY_TIMEOUT_S = 0.5
MAX_REPLAY_MESSAGES = 10_000
RECONNECT_MIN_MS, RECONNECT_MAX_MS = 200, 10_000


class KVEventSubscriber:
    def __init__(
        self,
        endpoints: Callable[[], list[Endpoint]],
        scorer: Callable[[], PrecisePrefixScorer | None],
        *,
        context: zmq.asyncio.Context | None = None,
        sync_interval_s: float = SYNC_INTERVAL_S,
    ) -> None:
        self.endpoints = endpoints
        self.scorer = scorer
        self.context = context or zmq.asyncio.Context.instance()
        self.sync_interval_s = sync_interval_s
        self._sockets: dict[str, tuple[str, zmq.asyncio.Socket]] = {}  # pod → address, SUB
        self._task: asyncio.Task[None] | None = None
        self.gaps = 0
        self.replayed = 0
        self.bad_payloads = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for _, sock in self._sockets.values():
            sock.close(linger=0)
        self._sockets.clear()

    # ------------------------------------------------------------------ sockets

    def address(self, endpoint: Endpoint, scorer: PrecisePrefixScorer) -> str:
        label = endpoint.labels.get(scorer.params.events_label)
        return label or f"tcp://{endpoint.address}:{scorer.params.events_port}"

    def sync(self) -> None:
        """Subscribe to new pods, drop the ones that left (or all, without a scorer)."""
        scorer = self.scorer()
        wanted: dict[str, str] = {}
        if scorer is not None:
            wanted = {e.name: self.address(e, scorer) for e in self.endpoints()}
        for pod in list(self._sockets):
            address, sock = self._sockets[pod]
            if wanted.get(pod) != address:
                sock.close(linger=0)
                del self._sockets[pod]
                if scorer is not None:
                    scorer.kv_index.forget(pod)
        for pod, address in wanted.items():
            if pod in self._sockets:
                continue
            sock = self.context.socket(zmq.SUB)
            sock.setsockopt(zmq.LINGER, 0)
            # a pod that publishes nothing (yet) is retried with backoff up to 10 s,
            # not ZMQ's fixed 100 ms: a pool of silent pods costs no connect storm
            sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MIN_MS)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
            sock.setsockopt(zmq.SUBSCRIBE, b"")
            try:
                sock.connect(address)
            except zmq.ZMQError as error:
                log.warning("kv events: cannot connect to %s for %s: %s", address, pod, error)
                sock.close(linger=0)
                continue
            self._sockets[pod] = (address, sock)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_sync = 0.0
        while True:
            if loop.time() >= next_sync:
                self.sync()
                next_sync = loop.time() + self.sync_interval_s
            if not self._sockets:
                await asyncio.sleep(self.sync_interval_s)
                continue
            poller = zmq.asyncio.Poller()
            pods = {}
            for pod, (_, sock) in self._sockets.items():
                poller.register(sock, zmq.POLLIN)
                pods[sock] = pod
            ready = await poller.poll(timeout=int(self.sync_interval_s * 1000))
            scorer = self.scorer()
            if scorer is None:
                continue
            for ready_sock, _ in ready:
                sock = cast(zmq.asyncio.Socket, ready_sock)
                for frames in _drain(sock):
                    await self.handle(pods[sock], frames, scorer.kv_index)

    # ------------------------------------------------------------------ messages

    async def handle(self, pod: str, frames: list[bytes], index: KVBlockIndex) -> None:
        """Apply one `[topic, seq, payload]` message from `pod`."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.bad_payloads += 1
            return
        seq = int.from_bytes(frames[1], "big")
        last = index.last_seq(pod)
        if last >= 0 and seq <= last:  # the engine restarted: its cache is empty
            index.clear(pod)
        elif last >= 0 and seq > last + 1:
            self.gaps += 1
            await self._replay(pod, last + 1, seq, index)
        self._apply(pod, seq, frames[2], index)

    def _apply(self, pod: str, seq: int, payload: bytes, index: KVBlockIndex) -> None:
        try:
            batch = decode_batch(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.bad_payloads += 1
            return
        index.ingest(pod, batch, seq)

    async def _replay(self, pod: str, first: int, upto: int, index: KVBlockIndex) -> None:
        """Fetch batches `first` .. `upto - 1` from the pod's replay socket, if it has one."""
        endpoint = next((e for e in self.endpoints() if e.name == pod), None)
        address = endpoint.labels.get(REPLAY_LABEL) if endpoint is not None else None
        if not address:
            return
        req = self.context.socket(zmq.REQ)
        req.setsockopt(zmq.LINGER, 0)
        try:
            req.connect(address)
            await req.send(first.to_bytes(8, "big"))
            for _ in range(MAX_REPLAY_MESSAGES):
                if not await req.poll(int(REPLAY_TIMEOUT_S * 1000)):
                    return
                seq_bytes, payload = await req.recv_multipart()
                if not payload:  # the end marker
                    return
                seq = int.from_bytes(seq_bytes, "big")
                if first <= seq < upto:
                    self._apply(pod, seq, payload, index)
                    self.replayed += 1
        except (zmq.ZMQError, ValueError):
            return
        finally:
            req.close(linger=0)


def _drain(sock: zmq.asyncio.Socket, limit: int = 1000) -> Iterator[list[bytes]]:
    """The messages waiting on `sock` now (at most `limit`, so one pod cannot starve)."""
    for _ in range(limit):
        try:
            pending = cast("asyncio.Future[list[bytes]]", sock.recv_multipart(zmq.NOBLOCK))
            frames = pending.result()  # NOBLOCK: done at once, or zmq.Again
        except zmq.Again:
            return
        yield frames


class KVEventsCollector(Collector):
    """`/metrics` for the KV-event path, read at scrape time from the index and subscriber."""

    def __init__(
        self, subscriber: KVEventSubscriber, scorer: Callable[[], PrecisePrefixScorer | None]
    ) -> None:
        self.subscriber = subscriber
        self.scorer = scorer

    def collect(self) -> Iterator[Any]:
        scorer = self.scorer()
        index = scorer.kv_index if scorer is not None else None
        counters = (
            ("igw_kv_events_ingested", "KV events applied to the precise prefix index",
             index.events if index else 0),
            ("igw_kv_events_fallback", "Per-pod scoring decisions that fell back to the "
             "approximate prefix index because the pod's KV events were stale",
             index.fallbacks if index else 0),
            ("igw_kv_events_gaps", "Sequence gaps in pods' KV event streams",
             self.subscriber.gaps),
            ("igw_kv_events_bad_payloads", "KV event messages that did not decode",
             self.subscriber.bad_payloads),
        )  # fmt: skip
        for name, text, value in counters:
            family = CounterMetricFamily(name, text)
            family.add_metric([], value)
            yield family
        share = GaugeMetricFamily(
            "igw_kv_recompute_share",
            "Decayed share of the prompt tokens picks send to be computed that the fleet "
            "had cached and evicted (high: the pods' KV caches are too small for the traffic)",
        )
        share.add_metric([], index.recompute_share if index else 0.0)
        yield share
        blocks = GaugeMetricFamily(
            "igw_kv_index_blocks", "Blocks the precise prefix index holds per pod", labels=["pod"]
        )
        if index is not None:
            for pod, _ in self.subscriber._sockets.items():
                blocks.add_metric([pod], index.blocks(pod))
        yield blocks
        yield from _match_metrics(scorer)


def _match_metrics(scorer: PrecisePrefixScorer | None) -> Iterator[Any]:
    """Whether each pod's events carry the blocks the scorer hashes (`KVBlockIndex`
    `check`), and whether each tokenizer the scorer names is loaded."""
    outcomes = {
        outcome: CounterMetricFamily(
            f"igw_kv_events_{outcome}",
            f"Requests prefilled on the pod whose last prompt block its KV events {text} "
            "when they finished (only unmatched ones: it tokenizes or hashes differently)",
            labels=["pod"],
        )
        for outcome, text in (("matched", "held"), ("unmatched", "did not hold"))
    }
    ready = GaugeMetricFamily(
        "igw_kv_tokenizer_ready",
        "1 when the precise prefix scorer's tokenizer is loaded (0: its files have not "
        "arrived, and its models are scored with the approximate index)",
        labels=["tokenizer"],
    )
    if scorer is not None:
        for pod, (matched, unmatched) in sorted(scorer.kv_index.match_counts().items()):
            outcomes["matched"].add_metric([pod], matched)
            outcomes["unmatched"].add_metric([pod], unmatched)
        for spec, source in scorer.tokenizers.items():
            ready.add_metric([spec], 1.0 if source.ready or spec == "none" else 0.0)
    yield from outcomes.values()
    yield ready


def subscribe_pods(
    registry: Any, endpoints: Callable[[], list[Endpoint]], scheduler: Callable[[], object]
) -> KVEventSubscriber:
    """The subscriber a data plane starts and stops with its store, its metrics on
    `registry`; it follows whatever scheduler the data plane holds now (a reload may
    swap it), and subscribes only while that has a precise prefix scorer."""

    def scorer() -> PrecisePrefixScorer | None:
        found = getattr(scheduler(), "precise", None)
        return found if isinstance(found, PrecisePrefixScorer) else None

    subscriber = KVEventSubscriber(endpoints, scorer)
    registry.register(KVEventsCollector(subscriber, scorer))
    return subscriber
