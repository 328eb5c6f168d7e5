"""The pods' KV events on the simulator's clock: what a subscribed picker's index hears.

Each pod's block pool reports what it caches and evicts (`emulator.kvcache.KVEventSink`);
the live emulator turns those calls into vLLM's ZMQ batches, the simulator into entries
of one fleet-wide queue stamped with the virtual time. `pump(now)` hands every entry
older than `latency_s` (the publisher's flush interval plus a network hop) to each
subscribed `KVBlockIndex`, through the same `stored` / `removed` / `heard` calls the
live subscriber makes, so the precise scorer runs the same code in both drivers.
Subscribers are per pod name: every gateway replica subscribes its own index, as every
replica of a real picker holds its own SUB socket to each pod.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from inference_gateway.core.scheduling.kv_index import KVBlockIndex

__all__ = ["DEFAULT_LATENCY_S", "FleetKVFeed", "PodKVSink", "SimClock"]

DEFAULT_LATENCY_S = 0.005  # vLLM's publisher thread plus a hop inside a cluster


class SimClock:
    """The driver's current time, read by the feed and by subscribed indexes."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FleetKVFeed:
    def __init__(self, clock: SimClock, latency_s: float = DEFAULT_LATENCY_S) -> None:
        self.clock = clock
        self.latency_s = latency_s
        self._queue: deque[tuple[float, str, bool, list[Hashable]]] = deque()
        self._subscribers: dict[str, list[KVBlockIndex]] = {}

    def sink(self, pod: str) -> PodKVSink:
        return PodKVSink(self, pod)

    def subscribe(self, pod: str, index: KVBlockIndex) -> None:
        self._subscribers.setdefault(pod, []).append(index)

    def emit(self, pod: str, stored: bool, hashes: list[Hashable]) -> None:
        if pod in self._subscribers:
            self._queue.append((self.clock.now, pod, stored, hashes))

    def pump(self, now: float) -> None:
        queue, due = self._queue, now - self.latency_s
        while queue and queue[0][0] <= due:
            _, pod, stored, hashes = queue.popleft()
            for index in self._subscribers[pod]:
                if stored:
                    index.stored(pod, hashes)  # type: ignore[arg-type]  # sim ids are ints
                else:
                    index.removed(pod, hashes)  # type: ignore[arg-type]
                index.events += 1
                index.heard(pod)


class PodKVSink:
    """One pod's `KVEventSink` into the fleet feed."""

    __slots__ = ("feed", "pod")

    def __init__(self, feed: FleetKVFeed, pod: str) -> None:
        self.feed = feed
        self.pod = pod

    def stored(self, hashes: list[Hashable]) -> None:
        self.feed.emit(self.pod, True, hashes)

    def removed(self, hashes: list[Hashable]) -> None:
        self.feed.emit(self.pod, False, hashes)
