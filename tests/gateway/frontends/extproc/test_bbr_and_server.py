"""The body-based router, and the picker's serving surface: gRPC health, TLS, metrics,
and `igw picker` as a process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import FakeEnvoy, PickerFactory
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.frontends.bbr import start_bbr
from inference_gateway.transport.http2_server import ssl_context
from inference_gateway.transport.tls import self_signed, server_credentials

CONFIG = {
    "pools": [{"name": "p", "selector": {"app": "vllm"}}],
    "models": [{"name": "llama-3.1-8b", "pool": "p", "adapters": ["sql"]}],
}


async def health(
    target: str, credentials: grpc.ChannelCredentials | None = None, service: str = ""
) -> int:
    channel = (
        grpc.aio.secure_channel(
            target, credentials, options=[("grpc.ssl_target_name_override", "localhost")]
        )
        if credentials
        else grpc.aio.insecure_channel(target)
    )
    async with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return int(reply.status)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (
            "llama-3.1-8b",
            [
                ("X-Gateway-Model-Name", b"llama-3.1-8b"),
                ("X-Gateway-Base-Model-Name", b"llama-3.1-8b"),
            ],
        ),
        (
            "sql",
            [("X-Gateway-Model-Name", b"sql"), ("X-Gateway-Base-Model-Name", b"llama-3.1-8b")],
        ),
    ],
)
async def test_bbr_sets_model_headers_and_passes_the_body(
    model: str, expected: list[tuple[str, bytes]]
) -> None:
    server, port = await start_bbr(parse_config(CONFIG), host="127.0.0.1", port=0)
    body = orjson.dumps({"model": model, "prompt": "x"})
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            stream = envoy.open()
            out = await envoy.send_request(stream, "/v1/completions", body, chunk_size=7)
            await stream.close()
        assert await health(f"127.0.0.1:{port}") == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)
    answer = out.messages[0].request_headers.response
    assert answer.clear_route_cache
    assert [(h.header.key, h.header.raw_value) for h in answer.header_mutation.set_headers] == (
        expected
    )
    assert out.upstream_body == body


async def test_bbr_refuses_a_body_over_its_limit_and_passes_one_at_it() -> None:
    """`--max-body-bytes` (the chart passes the picker's value): a body bbr would pass is
    one the picker reads, a larger one is a 413 from bbr itself, before Envoy buffers it."""
    limit = 4096
    server, port = await start_bbr(None, host="127.0.0.1", port=0, max_body_bytes=limit)
    head = b'{"model": "llama-3.1-8b", "prompt": "'
    at_limit = head + b"x" * (limit - len(head) - 2) + b'"}'
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            over = await envoy.send_request(envoy.open(), "/v1/completions", at_limit + b" ")
            fits = await envoy.send_request(envoy.open(), "/v1/completions", at_limit)
    finally:
        await server.stop(0)
    assert over.immediate is not None and over.immediate.status.code == 413
    assert fits.immediate is None and fits.upstream_body == at_limit


async def test_bbr_without_a_model_passes_through_untouched() -> None:
    server, port = await start_bbr(None, host="127.0.0.1", port=0)
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            stream = envoy.open()
            out = await envoy.send_request(stream, "/v1/completions", b"{not json")
            await stream.close()
    finally:
        await server.stop(0)
    assert out.messages[0] == pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(response=pb.CommonResponse())
    )
    assert out.upstream_body == b"{not json"


@pytest.mark.parametrize("transport", ["http2", "grpcio"])
async def test_readiness_is_serving_with_zero_ready_pods(
    make_picker: PickerFactory, transport: str
) -> None:
    """Readiness means "can serve the protocol": SERVING once config and pools are synced,
    whatever the pod count, on the ext_proc port and the plain `--grpc-health-port`
    (upstream's EPP is SERVING once its datastore has synced the pool; a picker that
    waited for pods would deadlock an Argo CD sync wave and a scale from zero)."""
    nothing = await make_picker(endpoints=[], transport=transport, health_port=0)
    dead = await make_picker(
        endpoints=[Endpoint("dead", "127.0.0.1", 9, pool="p")], transport=transport
    )
    serving = health_pb2.HealthCheckResponse.SERVING
    for target in (
        f"127.0.0.1:{nothing.port}",
        f"127.0.0.1:{nothing.health_bound}",
        f"127.0.0.1:{dead.port}",
    ):
        for service in ("", "readiness", "liveness"):
            assert await health(target, service=service) == serving, (target, service)
    assert not nothing.store.ready() and not dead.store.ready()


async def test_readiness_waits_for_the_pools_to_sync(make_picker: PickerFactory) -> None:
    """Not synced yet (Kubernetes: the pods not listed once): NOT_SERVING; synced with
    zero pods: SERVING."""
    synced = [False]
    picker = await make_picker(endpoints=[], synced=lambda: synced[0], health_interval_s=0.01)
    target = f"127.0.0.1:{picker.port}"
    assert await health(target, service="readiness") == health_pb2.HealthCheckResponse.NOT_SERVING
    synced[0] = True
    async with asyncio.timeout(5):
        while await health(target, service="readiness") != health_pb2.HealthCheckResponse.SERVING:
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("transport", ["http2", "grpcio"])
async def test_liveness_ignores_pods_and_lease_readiness_follows_the_lease(
    make_picker: PickerFactory, transport: str
) -> None:
    """A picker with no ready pod and no lease stays live, so its liveness probe never
    restarts it during a model outage, a scale-from-zero or on a standby replica; readiness
    says a standby replica cannot pick. Upstream: the endpoint picker's gRPC health server
    answers the
    `liveness` service SERVING regardless of datastore and leader state, and `readiness`
    only when the pool is synced and (with leader election) it leads
    (kubernetes-sigs/gateway-api-inference-extension, pkg/epp/server health service names
    `liveness` / `readiness`)."""
    dead = [Endpoint("dead", "127.0.0.1", 9, pool="p")]
    picker = await make_picker(endpoints=dead, is_leader=lambda: False, transport=transport)
    target = f"127.0.0.1:{picker.port}"
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        (health_pb2.HealthCheckResponse.NOT_SERVING),
    )
    assert await health(target, service="liveness") == serving
    assert await health(target, service="readiness") == not_serving
    assert await health(target) == not_serving


async def test_the_health_loop_sweeps_idle_buckets_and_leaves_the_gauges_to_their_readers(
    make_picker: PickerFactory,
) -> None:
    """A replica nobody scrapes still lets an idle client's rate-limit bucket go (the
    health loop sweeps), and the loop computes no pool gauges: `/metrics`, the EMF emitter
    and `/status` compute them when they read (at 100 pools of 1,024 pods that took 2-3 ms
    of the loop every 0.2 s)."""
    config = {**CONFIG, "rateLimits": [{"requestsPerMinute": 5, "windowS": 1}]}
    picker = await make_picker(config, health_interval_s=0.01)
    refreshed: list[object] = []
    picker.director.refresh_gauges = refreshed.append  # type: ignore[method-assign]
    limiter = picker.director.state.limiter
    assert limiter.check("client", "llama-3.1-8b", 1, 0, time.monotonic()).allowed
    assert len(limiter) == 1
    async with asyncio.timeout(5):
        while len(limiter):
            await asyncio.sleep(0.05)
    assert refreshed == []


async def test_health_is_not_serving_while_not_the_leader(make_picker: PickerFactory) -> None:
    leading = [False]
    picker = await make_picker(is_leader=lambda: leading[0], health_interval_s=0.01)
    target = f"127.0.0.1:{picker.port}"
    assert await health(target) == health_pb2.HealthCheckResponse.NOT_SERVING
    leading[0] = True
    async with asyncio.timeout(5):
        while await health(target) != health_pb2.HealthCheckResponse.SERVING:
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("transport", ["http2", "grpcio"])
async def test_tls_with_a_self_signed_certificate_and_metrics_port(
    make_picker: PickerFactory, transport: str
) -> None:
    if transport == "http2":
        cert, key = self_signed()
        tls: dict[str, Any] = {"ssl_context": ssl_context(cert, key)}
    else:
        credentials, cert = server_credentials()
        tls = {"credentials": credentials}
    picker = await make_picker(metrics_port=0, transport=transport, health_port=0, **tls)
    client_credentials = grpc.ssl_channel_credentials(root_certificates=cert)
    target = f"127.0.0.1:{picker.port}"
    assert await health(target, client_credentials) == health_pb2.HealthCheckResponse.SERVING
    # the kubelet's gRPC probes speak plain text: health alone on its own port
    plain = f"127.0.0.1:{picker.health_bound}"
    for service in ("liveness", "readiness"):
        assert await health(plain, service=service) == health_pb2.HealthCheckResponse.SERVING
    body = orjson.dumps({"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 2})
    async with FakeEnvoy(target, client_credentials) as envoy:
        out = await envoy.exchange("/v1/completions", body)
    assert out.status == 200
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{picker.metrics_bound}/metrics") as response,
    ):
        text = await response.text()
    assert 'inference_objective_request_total{model_name="llama-3.1-8b"' in text
    assert "inference_pool_ready_pods" in text


def free_port() -> int:
    """A loopback port free now (`--metrics-port 0` turns the metrics server off)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_igw_picker_process_serves_and_stops_on_sigterm(
    fleet: EmulatedFleet, tmp_path: Path
) -> None:
    endpoints = tmp_path / "endpoints.yaml"
    fleet.write_endpoints(endpoints)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "inference_gateway.cli.main",
        "picker",
        "--endpoints",
        str(endpoints),
        "--host",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--metrics-port",
        str(free_port()),
        "--emf-interval",
        "60",
        "--emf-cluster",
        "igw-test",
        "--hourly-cost",
        "12.5",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(30):
            line = (await process.stdout.readline()).decode()
        assert line.startswith("igw picker: ext_proc on 127.0.0.1:"), line
        port = int(line.split("127.0.0.1:")[1].split(",")[0])
        metrics_port = int(line.rsplit(":", 1)[1])
        assert await health(f"127.0.0.1:{port}") == health_pb2.HealthCheckResponse.SERVING
        # the heartbeat igw global reads, served by the picker beside /metrics
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{metrics_port}/status") as response,
        ):
            status = await response.json()
        assert status["cluster"] == "igw-test" and status["hourlyCostUsd"] == 12.5
        assert status["readyPods"] >= 1
        body = orjson.dumps({"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 2})
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            assert (await envoy.exchange("/v1/completions", body)).status == 200
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            rest = (await process.stdout.read()).decode().splitlines()
            assert await process.wait() == 0
        # In the cluster the picker routes, so it writes the EMF records the CloudWatch
        # alarms read (the last, partial interval is written on SIGTERM).
        records = [orjson.loads(r) for r in rest if r.startswith('{"_aws"')]
        assert records and records[-1]["Cluster"] == "igw-test"
        assert sum(r["Requests"] for r in records) == 1 and records[-1]["ReadyPods"] >= 1
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_igw_bbr_stops_on_a_stop_signal_with_the_shared_drain_line(
    sig: signal.Signals,
) -> None:
    """`igw bbr` stops on SIGTERM and SIGHUP alike and says what its drain waited for,
    in the line every `igw` server logs (transport/signals.py `log_drained`)."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "inference_gateway.cli.main",
        "bbr",
        "--grpc-port",
        str(port),
        "--drain-grace",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        async with asyncio.timeout(20):
            line = await process.stdout.readline()
        assert b"ext_proc on" in line, line
        body = orjson.dumps({"model": "m", "prompt": "x"})
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:  # served before the signal
            stream = envoy.open()
            out = await envoy.send_request(stream, "/v1/completions", body)
            await stream.close()
        assert out.upstream_body == body
        process.send_signal(sig)
        async with asyncio.timeout(10):
            assert await process.wait() == 0
        log = (await process.stderr.read()).decode()
        assert f"{sig.name} received" in log, log
        assert "igw bbr: drained in" in log and "0 cut at the grace period" in log, log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
