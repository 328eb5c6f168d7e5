"""The pods' KV events into the picker's block index: who to subscribe, where batches go.

The ZMQ subscriber (`transport/kv_events_zmq.py`) knows sockets and sequences, the block
index (`core/scheduling/kv_index.py`) knows blocks; this module joins them for `igw
serve` and `igw picker`. It follows whatever scheduler the data plane holds now (a
reload may swap it; the index is kept across reloads) and subscribes only while that
has a precise prefix scorer: each endpoint of the store is a publisher at its label
`igw.dev/kv-events` (the scorer's `events_label`, a full endpoint) or
`tcp://ADDRESS:events_port`, replaying from its label `igw.dev/kv-events-replay` when it
has one, else from `tcp://ADDRESS:replay_port` when the scorer names that port (the
model-server chart sets vLLM's `replay_endpoint` and the port). At every sync it also
bounds each pod's index by the capacity its latest scrape reports
(`vllm:cache_config_info{num_gpu_blocks}`), so a pod is held to its own size whether or
not it is ever picked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.plugins.precise_prefix import PrecisePrefixScorer
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.protocols.vllm.kv_events import BatchView
from inference_gateway.transport.kv_events_zmq import KVEventSubscriber, Publisher

__all__ = ["REPLAY_LABEL", "IndexFeed", "KVEventsCollector", "subscribe_pods"]

REPLAY_LABEL = "igw.dev/kv-events-replay"


class IndexFeed:
    """The subscriber's publishers and consumer, over the data plane's current scheduler."""

    def __init__(
        self, endpoints: Callable[[], list[Endpoint]], scheduler: Callable[[], object]
    ) -> None:
        self.endpoints = endpoints
        self.scheduler = scheduler

    def scorer(self) -> PrecisePrefixScorer | None:
        found = getattr(self.scheduler(), "precise", None)
        return found if isinstance(found, PrecisePrefixScorer) else None

    def index(self) -> KVBlockIndex | None:
        """The scheduler's index (kept across reloads, with or without the scorer)."""
        found = getattr(self.scheduler(), "kv_index", None)
        return found if isinstance(found, KVBlockIndex) else None

    def publishers(self) -> list[Publisher]:
        """Every pod, while the scheduler has a precise scorer (none otherwise); each
        pod's index bounded by its scraped capacity on the way."""
        scorer = self.scorer()
        if scorer is None:
            return []
        params, index = scorer.params, scorer.kv_index
        out = []
        for e in self.endpoints():
            metrics = e.metrics
            if metrics is not None and metrics.num_gpu_blocks:
                index.set_capacity(e.name, metrics.num_gpu_blocks)
            address = e.labels.get(params.events_label) or f"tcp://{e.address}:{params.events_port}"
            replay = e.labels.get(REPLAY_LABEL) or (
                f"tcp://{e.address}:{params.replay_port}" if params.replay_port else None
            )
            out.append(Publisher(e.name, address, replay))
        return out

    # the consumer (`transport.kv_events_zmq.KVEventConsumer`)

    def batch(self, pod: str, view: BatchView) -> Iterator[None]:
        index = self.index()
        return index.ingest_view(pod, view) if index is not None else iter(())

    def restarted(self, pod: str) -> None:
        index = self.index()
        if index is not None:
            index.clear(pod)

    def gone(self, pod: str) -> None:
        index = self.index()
        if index is not None:
            index.forget(pod)


class KVEventsCollector(Collector):
    """`/metrics` for the KV-event path, read at scrape time from the index and subscriber."""

    def __init__(self, subscriber: KVEventSubscriber, feed: IndexFeed) -> None:
        self.subscriber = subscriber
        self.feed = feed

    def collect(self) -> Iterator[Any]:
        index, sub = self.feed.index(), self.subscriber
        counters: Iterable[tuple[str, str, int]] = (
            ("igw_kv_events_ingested", "KV events applied to the precise prefix index",
             index.events if index else 0),
            ("igw_kv_events_fallback", "Per-pod scoring decisions that fell back to the "
             "approximate prefix index because the pod's KV events were stale",
             index.fallbacks if index else 0),
            ("igw_kv_events_gaps", "Sequence gaps in pods' KV event streams", sub.gaps),
            ("igw_kv_events_replayed", "KV event batches recovered from pods' replay sockets",
             sub.replayed),
            ("igw_kv_events_replay_failures", "Replays that did not fill their gap in time "
             "(that pod's gaps are not replayed for a while)", sub.replay_failures),
            ("igw_kv_events_bad_payloads", "KV event messages that did not decode",
             sub.bad_payloads),
            ("igw_kv_events_reconnects", "Connections to pods' publishers opened again after "
             "they ended (the pod went away, or sent a message over the size cap)",
             sub.reconnects),
            ("igw_kv_events_refused", "KV event batches that stored, evicted or carried "
             "more than one engine step of the pod can (the rest of the batch dropped)",
             index.refused if index else 0),
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
            for pod in sub.pods():
                blocks.add_metric([pod], index.blocks(pod))
        yield blocks
        yield from _match_metrics(index, self.feed.scorer())


def _match_metrics(index: KVBlockIndex | None, scorer: PrecisePrefixScorer | None) -> Iterator[Any]:
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
    if index is not None:
        for pod, (matched, unmatched) in sorted(index.match_counts().items()):
            outcomes["matched"].add_metric([pod], matched)
            outcomes["unmatched"].add_metric([pod], unmatched)
    if scorer is not None:
        for spec, source in scorer.tokenizers.items():
            ready.add_metric([spec], 1.0 if source.ready or spec == "none" else 0.0)
    yield from outcomes.values()
    yield ready


def subscribe_pods(
    registry: Any, endpoints: Callable[[], list[Endpoint]], scheduler: Callable[[], object]
) -> KVEventSubscriber:
    """The subscriber a data plane starts and stops with its store, its metrics on
    `registry`."""
    feed = IndexFeed(endpoints, scheduler)
    subscriber = KVEventSubscriber(feed.publishers, feed)
    registry.register(KVEventsCollector(subscriber, feed))
    return subscriber
