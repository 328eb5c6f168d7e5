"""Prometheus metrics the gateway exports, under the upstream GIE names, so dashboards
and alerts written for the upstream picker work unchanged."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["GatewayMetrics", "migration_series"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)
# a view is due every scrape interval (50 ms by default); past `staleness_s` (2 s) it is stale
VIEW_AGE_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2)


def migration_series(r: CollectorRegistry) -> tuple[Counter, Histogram]:
    """Resume on break (docs/migration.md), one definition for `igw serve` (`tier` 1:
    pods) and `igw global` (`tier` 2: clusters): one count per stream that broke after
    its first byte and could have been resumed, and the resume gap."""
    migrations = Counter(
        "igw_request_migrations_total",
        "Streams that broke after their first byte, by tier, reason (connection, "
        "stall, error_event) and outcome (resumed, failed: no target took the "
        "continuation, exhausted: past the attempts, not_resumable).",
        ["tier", "reason", "outcome"],
        registry=r,
    )
    gap = Histogram(
        "igw_request_resume_gap_seconds",
        "From the last chunk before a stream broke to the first chunk of its continuation.",
        ["tier"],
        buckets=LATENCY_BUCKETS,
        registry=r,
    )
    return migrations, gap


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        labels = ["model_name", "target_model_name"]
        self.requests = Counter(
            "inference_objective_request_total", "Requests by model.", labels, registry=r
        )
        self.errors = Counter(
            "inference_objective_request_error_total",
            "Failed requests by model and code.",
            [*labels, "error_code"],
            registry=r,
        )
        # upstream's in-flight gauge, same name and label (GIE pkg/epp/metrics/metrics.go
        # `runningRequests`): admitted requests whose answer has not ended, by client model
        self.running = Gauge(
            "inference_objective_running_requests",
            "Requests admitted and not ended yet, by model.",
            ["model_name"],
            registry=r,
        )
        # llm-d's P/D decision counter, same name and labels (llm-d-router
        # pkg/epp/.../disagg metrics: `llm_d_epp_disagg_decision_total`), so its
        # dashboards read ours: one per request of a profile with a pd-profile-handler
        self.pd_decisions = Counter(
            "llm_d_epp_disagg_decision_total",
            "P/D decisions: prefill-decode (a prefill leg first) or decode-only.",
            ["model_name", "decision_type"],
            registry=r,
        )
        self.cancelled = Counter(  # not errors: the error-rate alarm must not fire on them
            "inference_objective_request_cancelled_total",
            "Requests whose client left before the answer ended.",
            labels,
            registry=r,
        )
        self.duration = Histogram(
            "inference_objective_request_duration_seconds",
            "End-to-end latency.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "inference_objective_request_ttft_seconds",
            "Time to first token.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.input_tokens = Histogram(
            "inference_objective_input_tokens",
            "Prompt tokens per request.",
            labels,
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.output_tokens = Histogram(
            "inference_objective_output_tokens",
            "Output tokens per request.",
            labels,
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.pool_kv = Gauge(
            "inference_pool_average_kv_cache_utilization",
            "Mean KV-cache use of ready pods.",
            ["name"],
            registry=r,
        )
        self.pool_queue = Gauge(
            "inference_pool_average_queue_size",
            "Mean waiting requests of ready pods.",
            ["name"],
            registry=r,
        )
        self.pool_ready = Gauge(
            "inference_pool_ready_pods", "Pods with a fresh scrape.", ["name"], registry=r
        )
        self.scheduler_e2e = Histogram(
            "inference_extension_scheduler_e2e_duration_seconds",
            "Time to pick an endpoint.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
            registry=r,
        )
        self.plugin_duration = Histogram(
            "inference_extension_plugin_duration_seconds",
            "Time spent in one plugin call.",
            ["plugin_type", "plugin_name"],
            buckets=(0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005),
            registry=r,
        )

        self.pool_saturation = Gauge(
            "inference_pool_saturation",
            "Mean per-pod max(queue/threshold, kv/threshold); 1 means full (autoscaling signal).",
            ["name"],
            registry=r,
        )
        self.queue_size = Gauge(
            "inference_extension_flow_control_queue_size",
            "Requests waiting for admission, per pool and priority band.",
            ["name", "band"],
            registry=r,
        )
        self.rejected = Counter(
            "inference_objective_request_rejected_total",
            "Requests turned away before reaching a pod, by reason.",
            ["model_name", "reason"],
            registry=r,
        )
        self.config_reloads = Counter(
            "igw_config_reloads_total",
            "Config reloads by source (file, kubernetes) and result (applied, rejected).",
            ["source", "result"],
            registry=r,
        )
        self.scrape_interval = Gauge(
            "igw_scrape_interval_seconds",
            "Metrics scrape interval in force (above the configured one when scraping "
            "every pod at it would exceed the scrape CPU budget).",
            registry=r,
        )
        self.scrape_round_cpu = Gauge(
            "igw_scrape_round_cpu_seconds",
            "CPU one scrape of every pod takes (lowest of the recent rounds).",
            registry=r,
        )
        self.view_age = Histogram(
            "igw_scrape_view_age_seconds",
            "Age of the picked pod's metrics when a decision used them (time since its "
            "last good scrape began).",
            buckets=VIEW_AGE_BUCKETS,
            registry=r,
        )
        self.view_age_max = Gauge(
            "igw_scrape_view_age_max_seconds",
            "Oldest metrics of a routable (not stale) pod now: time since its last good "
            "scrape began.",
            registry=r,
        )
        self.ratelimit_buckets = Gauge(
            "igw_ratelimit_buckets",
            "Rate-limit buckets this replica keeps (one per client, rule and kind; idle ones "
            "expire a window after their last use).",
            registry=r,
        )
        self.ratelimit_evictions = Counter(
            "igw_ratelimit_evictions_total",
            "Rate-limit buckets dropped because the bucket cap was reached (those clients "
            "start from an empty bucket).",
            registry=r,
        )
        self.pd_prefill_legs = Counter(
            "igw_pd_prefill_legs_total",
            "P/D prefill legs igw serve ran, by outcome (ok, or why the request was served "
            "aggregated: connect_error, timeout, no_params, http_<status>, broken).",
            ["outcome"],
            registry=r,
        )
        self.migrations, self.resume_gap = migration_series(r)  # tier 1
        self._plugin_series: dict[tuple[str, str], Any] = {}

    def watch_scrapes(self, store: Any) -> None:
        """Read the endpoint store's scrape interval, round cost and oldest view at every
        export."""
        self.scrape_interval.set_function(lambda: store.current_interval_s)
        self.scrape_round_cpu.set_function(lambda: store.round_cpu_s)
        self.view_age_max.set_function(store.max_view_age_s)

    def time_plugin(self, kind: str, name: str, seconds: float) -> None:
        """The scheduler's plugin timer; the labelled series are cached, since `labels()`
        takes a lock and builds its key on every call (several plugin calls a request)."""
        series = self._plugin_series.get((kind, name))
        if series is None:
            series = self._plugin_series[(kind, name)] = self.plugin_duration.labels(kind, name)
        series.observe(seconds)
