"""A pod's `/metrics`: vLLM's exact metric names, read from the engine at scrape time.

Routers only see a pod through this text, so names, label names and units follow vLLM V1
(`vllm/v1/metrics/loggers.py`):

* gauges `vllm:num_requests_running`, `vllm:num_requests_waiting`,
  `vllm:kv_cache_usage_perc` and its older alias `vllm:gpu_cache_usage_perc` (a fraction
  in [0, 1] despite the name), all labelled `model_name`;
* `vllm:lora_requests_info{running_lora_adapters, waiting_lora_adapters, max_lora}`,
  only when LoRA is enabled, whose *value is a Unix timestamp* (routers take the newest
  series); `vllm:cache_config_info{block_size, num_gpu_blocks, …}` with value 1;
* counters `vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total` (in
  tokens), `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
  `vllm:request_success_total{finished_reason}`, `vllm:num_preemptions_total`;
* histograms `vllm:time_to_first_token_seconds` and `vllm:e2e_request_latency_seconds`
  with vLLM's buckets.

One deliberate difference: prompt tokens are counted when a request's prefill completes
and generation tokens when it finishes, not step by step; totals agree once requests end.

Gauges are read from an `EngineSnapshot` when scraped, so a scrape sees the engine as
of its last committed step. A custom collector on a per-pod `CollectorRegistry` keeps
many pods in one process apart and emits no `_created` series. It describes its
families, as vLLM's registered metrics are, so `render(names)` serves prometheus_client's
own `restricted_registry`: what vLLM's `/metrics/?name[]=…` answers.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from inference_gateway.emulator.engine import EngineRequest, EngineSnapshot

__all__ = ["E2E_BUCKETS", "TTFT_BUCKETS", "PodMetrics"]

# vLLM V1's buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class _Histogram:
    """Bucket counts kept by hand, so the collector can emit them under any labels."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append((floatToGoString(bound), total))  # type: ignore[no-untyped-call]
        return out


class PodMetrics:
    """Counters fed by engine events, rendered with the engine's live gauges.

    `snapshot` is called at scrape time; `cache_info` holds the `cache_config_info`
    labels (vLLM's CacheConfig fields).
    """

    def __init__(
        self,
        *,
        model_name: str,
        snapshot: Callable[[], EngineSnapshot],
        cache_info: dict[str, str],
    ) -> None:
        self.model_name = model_name
        self.snapshot = snapshot
        self.cache_info = cache_info
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.finished: Counter[str] = Counter()
        self.ttft = _Histogram(TTFT_BUCKETS)
        self.e2e = _Histogram(E2E_BUCKETS)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_PodCollector(self))

    # engine listener hooks (forwarded by the real-time driver)
    def on_first_token(self, request: EngineRequest, time: float) -> None:
        self.ttft.observe(time - request.arrival)
        self.prompt_tokens += request.prompt_tokens

    def on_step(self, time: float) -> None:
        pass

    def on_finish(self, request: EngineRequest, time: float) -> None:
        self.generation_tokens += request.output_tokens
        self.preemptions += request.preemptions
        self.finished[getattr(request.tag, "finish_reason", "stop")] += 1
        self.e2e.observe(time - request.arrival)

    def render(self, names: Sequence[str] = ()) -> bytes:
        """The page; only the samples called `names` when any are given."""
        registry = self.registry.restricted_registry(names) if names else self.registry
        return generate_latest(registry)


_DESCRIBED = EngineSnapshot(
    num_waiting=0,
    num_running=0,
    kv_usage=0.0,
    running_adapters=(),
    waiting_adapters=(),
    max_loras=1,
    num_gpu_blocks=0,
    block_size=0,
    prefix_cache_queries=0,
    prefix_cache_hits=0,
)


class _PodCollector(Collector):
    def __init__(self, metrics: PodMetrics) -> None:
        self.m = metrics

    def describe(self) -> Iterator[Metric]:
        """Every family `collect` may yield (LoRA's too), for the registry's name index."""
        return self._families(_DESCRIBED)

    def collect(self) -> Iterator[Metric]:
        return self._families(self.m.snapshot())

    def _families(self, snap: EngineSnapshot) -> Iterator[Metric]:
        m = self.m
        model = [m.model_name]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(model, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(model, value)
            return family

        yield gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            snap.num_running,
        )
        yield gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            snap.num_waiting,
        )
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            snap.kv_usage,
        )
        yield gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage (deprecated alias).",
            snap.kv_usage,
        )
        if snap.max_loras:
            lora = GaugeMetricFamily(
                "vllm:lora_requests_info",
                "Running stats on lora requests.",
                labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
            )
            lora.add_metric(
                [
                    str(snap.max_loras),
                    ",".join(snap.waiting_adapters),
                    ",".join(snap.running_adapters),
                ],
                time.time(),
            )
            yield lora
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=sorted(m.cache_info),
        )
        info.add_metric([m.cache_info[k] for k in sorted(m.cache_info)], 1.0)
        yield info
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            snap.prefix_cache_queries,
        )
        yield counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            snap.prefix_cache_hits,
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens)
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", m.generation_tokens
        )
        yield counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            m.preemptions,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["finished_reason", "model_name"],
        )
        for reason in ("length", "stop", "abort"):  # vLLM v1 FinishReason
            success.add_metric([reason, m.model_name], m.finished[reason])
        yield success
        for name, doc, hist in (
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                m.ttft,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                m.e2e,
            ),
        ):
            family = HistogramMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(model, hist.buckets(), hist.sum)
            yield family
