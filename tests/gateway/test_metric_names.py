"""docs/picker.md's metric table is true: every family the gateway exports is listed with
its labels, and each one it calls "upstream" has upstream's exact name and labels.

`UPSTREAM` is transcribed from kubernetes-sigs/gateway-api-inference-extension v1.x,
`pkg/epp/metrics/metrics.go` (Subsystem + Name, and the label list of each vector).
"""

from __future__ import annotations

import re
from pathlib import Path

from inference_gateway.telemetry.metrics import GatewayMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "picker.md"

UPSTREAM: dict[str, tuple[str, ...]] = {
    "inference_objective_request_total": ("model_name", "target_model_name"),
    "inference_objective_request_error_total": ("model_name", "target_model_name", "error_code"),
    "inference_objective_request_duration_seconds": ("model_name", "target_model_name"),
    "inference_objective_request_sizes": ("model_name", "target_model_name"),
    "inference_objective_response_sizes": ("model_name", "target_model_name"),
    "inference_objective_input_tokens": ("model_name", "target_model_name"),
    "inference_objective_output_tokens": ("model_name", "target_model_name"),
    "inference_objective_running_requests": ("model_name",),
    "inference_objective_normalized_time_per_output_token_seconds": (
        "model_name",
        "target_model_name",
    ),
    "inference_pool_average_kv_cache_utilization": ("name",),
    "inference_pool_average_queue_size": ("name",),
    "inference_pool_ready_pods": ("name",),
    "inference_extension_scheduler_e2e_duration_seconds": (),
    "inference_extension_plugin_duration_seconds": (
        "extension_point",
        "plugin_type",
        "plugin_name",
    ),
    "inference_extension_prefix_indexer_size": (),
    "inference_extension_info": ("commit", "build_ref"),
}


def documented() -> dict[str, tuple[tuple[str, ...], str]]:
    text = DOC.read_text()
    table = text.split("<!-- metrics-table -->")[1].split("<!-- /metrics-table -->")[0]
    rows: dict[str, tuple[tuple[str, ...], str]] = {}
    for line in table.splitlines():
        match = re.match(r"\| `([a-z0-9_:]+)` \| ([^|]*) \| ([^|]*) \|", line)
        if match:
            name, labels, origin = match.groups()
            names = tuple(x.strip() for x in labels.split(",") if x.strip() not in ("", "–"))
            rows[name] = (names, origin.strip())
    return rows


def exported() -> dict[str, tuple[str, ...]]:
    """Family names as scraped (prometheus_client adds `_total` to counters)."""
    out: dict[str, tuple[str, ...]] = {}
    for collector in GatewayMetrics().registry._collector_to_names:
        name = collector._name  # type: ignore[attr-defined]
        if collector._type == "counter":  # type: ignore[attr-defined]
            name += "_total"
        out[name] = tuple(collector._labelnames)  # type: ignore[attr-defined]
    return out


def test_the_table_lists_exactly_what_is_exported_with_its_labels() -> None:
    rows = documented()
    assert {name: labels for name, (labels, _) in rows.items()} == exported()


def test_every_family_called_upstream_has_upstreams_name_and_labels() -> None:
    claimed = {
        n: labels for n, (labels, origin) in documented().items() if origin.startswith("upstream")
    }
    assert "inference_objective_running_requests" in claimed
    for name, labels in claimed.items():
        assert name in UPSTREAM, f"{name} is not an upstream metric"
        assert labels == UPSTREAM[name], f"{name}: labels {labels}, upstream {UPSTREAM[name]}"


def test_a_family_with_upstreams_name_but_other_labels_is_not_called_upstream() -> None:
    for name, (labels, origin) in documented().items():
        if name in UPSTREAM and labels != UPSTREAM[name]:
            assert origin.startswith("ours"), name
