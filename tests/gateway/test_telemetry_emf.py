"""EMF records: the specification's shape, interval deltas, the P99 of TTFT, the emitter
loop, and the metric names the CDK alarms read."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest

from inference_gateway.telemetry import emf
from inference_gateway.telemetry.emf import (
    CLUSTER_METRICS,
    EmfEmitter,
    cluster_record,
    emf_record,
    fleet_record,
    histogram_quantile,
)
from inference_gateway.telemetry.metrics import GatewayMetrics

CLOCK = 1_700_000_000.25


def _assert_emf_shape(record: dict[str, Any]) -> None:
    """The EMF specification: `_aws.Timestamp` (ms), directives whose dimension and metric
    names are all root members, dimension values strings, metric values numbers."""
    aws = record["_aws"]
    assert isinstance(aws["Timestamp"], int) and aws["Timestamp"] > 10**12
    assert aws["CloudWatchMetrics"]
    for directive in aws["CloudWatchMetrics"]:
        assert set(directive) == {"Namespace", "Dimensions", "Metrics"}
        assert isinstance(directive["Namespace"], str) and directive["Namespace"]
        for dimension_set in directive["Dimensions"]:
            assert 1 <= len(dimension_set) <= 30
            for name in dimension_set:
                assert isinstance(record[name], str)
        assert 1 <= len(directive["Metrics"]) <= 100
        for metric in directive["Metrics"]:
            assert set(metric) == {"Name", "Unit"}
            assert isinstance(record[metric["Name"]], int | float)


def _emitter(metrics: GatewayMetrics, stream: io.StringIO | None = None) -> EmfEmitter:
    return EmfEmitter(
        metrics.registry,
        cluster="igw-test",
        interval_s=60,
        stream=stream or io.StringIO(),
        clock=lambda: CLOCK,
    )


# --- contract --------------------------------------------------------------------------


def test_alarm_metric_names_are_the_emitters() -> None:
    from stacks.parts import metrics as contract

    assert contract.CLUSTER_NAMESPACE == emf.CLUSTER_NAMESPACE == "InferenceGateway"
    assert contract.FLEET_NAMESPACE == emf.FLEET_NAMESPACE == "InferenceGateway/Global"
    assert contract.CLUSTER_METRICS is emf.CLUSTER_METRICS
    assert contract.FLEET_METRICS is emf.FLEET_METRICS
    assert sorted(CLUSTER_METRICS.values()) == sorted(
        [
            "KvCacheUtilization",
            "Requests",
            "Errors",
            "RateLimited",
            "TimeToFirstToken",
            "ReadyPods",
        ]
    )
    assert sorted(emf.FLEET_METRICS.values()) == [
        "FailoverEvents",
        "RateLimitHits",
        "RoutingDecisions",
    ]
    assert set(emf.CLUSTER_UNITS) == set(CLUSTER_METRICS)


def test_a_full_cluster_record_names_every_alarm_metric() -> None:
    values = dict.fromkeys(CLUSTER_METRICS, 1.0)
    record = cluster_record("igw-prod", values, 1_700_000_000_000)
    _assert_emf_shape(record)
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "InferenceGateway"
    assert directive["Dimensions"] == [["Cluster"]]
    assert {m["Name"] for m in directive["Metrics"]} == set(CLUSTER_METRICS.values())
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]}["TimeToFirstToken"] == "Seconds"
    assert record["Cluster"] == "igw-prod"


def test_fleet_record_uses_the_global_namespace_and_environment() -> None:
    record = fleet_record(
        "prod", {"routing_decisions": 10, "failovers": 1, "rate_limit_hits": 2}, 1_700_000_000_000
    )
    _assert_emf_shape(record)
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "InferenceGateway/Global"
    assert directive["Dimensions"] == [["Environment"]]
    assert record["Environment"] == "prod"
    assert (record["RoutingDecisions"], record["FailoverEvents"], record["RateLimitHits"]) == (
        10,
        1,
        2,
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cluster_record("c", {"latency": 1.0}, 1), "unknown cluster metrics"),
        (lambda: fleet_record("e", {"requests": 1.0}, 1), "unknown fleet metrics"),
        (
            lambda: emf_record(
                namespace="N", dimensions={"A": "x"}, metrics={"M": (1.0, "Tokens")}, timestamp_ms=1
            ),
            "not a CloudWatch unit",
        ),
        (
            lambda: emf_record(
                namespace="N", dimensions={"M": "x"}, metrics={"M": (1.0, "Count")}, timestamp_ms=1
            ),
            "both dimension and metric",
        ),
    ],
)
def test_bad_records_are_refused(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# --- P99 from buckets ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ([], None),
        ([(0.1, 0), (float("inf"), 0)], None),
        # 100 observations all in (0.5, 1]: rank 99 is 99 % of the way through it.
        ([(0.5, 0), (1.0, 100), (float("inf"), 100)], 0.995),
        # 90 fast, 10 in (1, 2.5]: rank 99 is the 9th of those 10.
        ([(0.1, 90), (1.0, 90), (2.5, 100), (float("inf"), 100)], 1.0 + 1.5 * 0.9),
        # Beyond the last finite bound: the largest finite bound.
        ([(0.1, 0), (120.0, 0), (float("inf"), 5)], 120.0),
    ],
)
def test_histogram_quantile(buckets: list[tuple[float, float]], expected: float | None) -> None:
    assert histogram_quantile(0.99, buckets) == pytest.approx(expected)


# --- interval deltas from a live GatewayMetrics ---------------------------------------------


def test_counters_are_interval_deltas_and_rejections_are_split_by_status() -> None:
    metrics = GatewayMetrics()
    metrics.requests.labels("chat", "llama").inc(7)  # before the emitter: not counted
    emitter = _emitter(metrics)

    metrics.requests.labels("chat", "llama").inc(10)
    metrics.requests.labels("sql", "llama").inc(5)
    metrics.errors.labels("chat", "llama", "502").inc(2)
    metrics.rejected.labels("chat", "rate_limited").inc(3)
    metrics.rejected.labels("chat", "pool_saturated").inc(1)
    metrics.rejected.labels("chat", "no_ready_endpoint").inc(4)
    first = emitter.record()
    _assert_emf_shape(first)
    assert first["_aws"]["Timestamp"] == int(CLOCK * 1000)
    # Requests: 15 served + 8 turned away; Errors: 2 × 502 + 4 × 503; RateLimited: 4 × 429.
    assert (first["Requests"], first["Errors"], first["RateLimited"]) == (23, 6, 4)

    metrics.requests.labels("chat", "llama").inc(1)
    second = emitter.record()
    assert (second["Requests"], second["Errors"], second["RateLimited"]) == (1, 0, 0)
    third = emitter.record()
    assert (third["Requests"], third["Errors"], third["RateLimited"]) == (0, 0, 0)


def test_ttft_p99_covers_only_the_interval_and_is_left_out_when_idle() -> None:
    metrics = GatewayMetrics()
    emitter = _emitter(metrics)
    assert "TimeToFirstToken" not in emitter.record()
    for _ in range(100):
        metrics.ttft.labels("chat", "llama").observe(0.04)  # bucket (0.025, 0.05]
    first = emitter.record()
    assert first["TimeToFirstToken"] == pytest.approx(0.025 + 0.025 * 0.99)
    names = {m["Name"] for m in first["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert "TimeToFirstToken" in names
    for _ in range(100):
        metrics.ttft.labels("sql", "llama").observe(3.0)  # bucket (2.5, 5]
    second = emitter.record()  # the fast ones are history now
    assert second["TimeToFirstToken"] == pytest.approx(2.5 + 2.5 * 0.99)
    third = emitter.record()
    assert "TimeToFirstToken" not in third
    assert "TimeToFirstToken" not in {
        m["Name"] for m in third["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    }


def test_pool_gauges_give_ready_pods_and_a_pod_weighted_kv_mean() -> None:
    metrics = GatewayMetrics()
    metrics.pool_ready.labels("h100").set(3)
    metrics.pool_kv.labels("h100").set(0.8)
    metrics.pool_ready.labels("a10g").set(1)
    metrics.pool_kv.labels("a10g").set(0.4)
    record = _emitter(metrics).record()
    assert record["ReadyPods"] == 4
    assert record["KvCacheUtilization"] == pytest.approx((3 * 0.8 + 0.4) / 4)

    metrics.pool_ready.labels("h100").set(0)
    metrics.pool_ready.labels("a10g").set(0)
    idle = _emitter(metrics).record()
    assert idle["ReadyPods"] == 0  # an outage is reported, not silent
    assert "KvCacheUtilization" not in idle


def test_a_counter_reset_counts_everything_since_the_reset() -> None:
    before = emf.Snapshot(requests=100)
    after = emf.Snapshot(requests=5)
    assert emf.interval_values(before, after)["requests"] == 5


def test_refresh_runs_before_each_read() -> None:
    metrics = GatewayMetrics()
    calls: list[int] = []

    def refresh() -> None:
        calls.append(1)
        metrics.pool_ready.labels("p").set(len(calls))

    emitter = EmfEmitter(
        metrics.registry, cluster="c", interval_s=1, stream=io.StringIO(), refresh=refresh
    )
    assert emitter.record()["ReadyPods"] == 1
    assert emitter.record()["ReadyPods"] == 2


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        EmfEmitter(GatewayMetrics().registry, cluster="c", interval_s=0)


# --- the asyncio loop --------------------------------------------------------------------


async def test_emitter_writes_one_json_line_per_interval_and_a_last_one_on_stop() -> None:
    metrics = GatewayMetrics()
    stream = io.StringIO()
    emitter = EmfEmitter(metrics.registry, cluster="igw-test", interval_s=0.02, stream=stream)
    await emitter.start()
    metrics.requests.labels("chat", "llama").inc(4)
    await asyncio.sleep(0.07)
    metrics.requests.labels("chat", "llama").inc(3)
    await emitter.stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3  # at least two ticks and the final record
    records = [json.loads(line) for line in lines]
    for record in records:
        _assert_emf_shape(record)
        assert record["Cluster"] == "igw-test"
    assert sum(r["Requests"] for r in records) == 7
    assert records[-1]["Requests"] == 3
    await emitter.stop()  # a second stop does nothing
    assert len(stream.getvalue().splitlines()) == len(lines)


# --- wired into `igw serve` ------------------------------------------------------------------


async def test_serve_writes_emf_records_of_real_requests(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import aiohttp
    from aiohttp import web

    from inference_gateway.assembly.serve import build_gateway
    from inference_gateway.core.scheduling.types import Endpoint
    from inference_gateway.emulator.fleet import EmulatedFleet

    fleet_spec = {
        "base_port": 0,
        "pods": [{"name": "p", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 2}],
    }
    async with EmulatedFleet(fleet_spec) as fleet:
        endpoints = [
            Endpoint(e.name, e.host, e.port, pool="p", labels=e.labels, index=i)
            for i, e in enumerate(fleet.endpoints)
        ]
        app, _ = build_gateway(endpoints, emf_interval_s=0.05, emf_cluster="igw-e2e")
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        body = {"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 2}
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.post(
                    f"http://127.0.0.1:{port}/v1/completions", json=body
                ) as reply:
                    assert reply.status == 200
                    await reply.read()
        await asyncio.sleep(0.12)
        await runner.cleanup()
    records = [
        json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line
    ]
    assert len(records) >= 2
    for record in records:
        _assert_emf_shape(record)
        assert record["Cluster"] == "igw-e2e"
        assert record["ReadyPods"] == 2
    assert sum(r["Requests"] for r in records) == 3
    assert sum(r["Errors"] for r in records) == 0
    assert any("TimeToFirstToken" in r for r in records)


def test_serve_cli_has_the_flag_off_by_default() -> None:
    import argparse

    from inference_gateway.cli import serve as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--endpoints", "e.yaml"])
    assert args.emf_interval == 0
    args = parser.parse_args(["serve", "--endpoints", "e.yaml", "--emf-interval", "60"])
    assert args.emf_interval == 60
