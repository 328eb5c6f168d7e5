"""A picker rollout keeps streams: `igw picker` as a process, SIGTERM while long SSE
streams run through it (Envoy's side played over gRPC on loopback, see fake_envoy.py).

On SIGTERM the picker says NOT_SERVING at once (the Service drops it, so Envoy opens new
streams on the other replicas), keeps serving what still arrives, and exits only when
its last ext_proc stream has ended, up to `--drain-timeout` (the chart sets the route's
timeout), logging how many streams it waited for.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import grpc
import orjson
from fake_envoy import FakeEnvoy
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inference_gateway.emulator.fleet import EmulatedFleet

CHAT = "/v1/chat/completions"
RUNNING = 'inference_objective_running_requests{model_name="llama-3.1-8b"}'
# long enough that each stream outlives the 5 s the picker used to allow after SIGTERM
STREAM_TOKENS = 1200


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stream(tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": "llama-3.1-8b",
            "messages": [{"role": "user", "content": "tell me a long story"}],
            "max_tokens": tokens,
            "stream": True,
        }
    )


async def readiness(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=5)
        return int(reply.status)


async def running(session: aiohttp.ClientSession, port: int) -> float:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith(RUNNING):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def start_picker(
    endpoints: Path, drain_timeout: float
) -> tuple[asyncio.subprocess.Process, int, int, int]:
    health_port, metrics_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "inference_gateway.cli",
        "picker",
        "--endpoints",
        str(endpoints),
        "--grpc-port",
        "0",
        "--grpc-health-port",
        str(health_port),
        "--metrics-port",
        str(metrics_port),
        "--drain-timeout",
        str(drain_timeout),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    async with asyncio.timeout(30):
        line = (await process.stdout.readline()).decode()
    assert line.startswith("igw picker: ext_proc on 127.0.0.1:"), line
    port = int(line.split("127.0.0.1:")[1].split(",")[0])
    return process, port, health_port, metrics_port


async def test_sigterm_during_four_long_streams_lets_all_four_finish(
    fleet: EmulatedFleet, tmp_path: Path
) -> None:
    endpoints = tmp_path / "endpoints.yaml"
    fleet.write_endpoints(endpoints)
    process, port, health_port, metrics_port = await start_picker(endpoints, 60)
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy, aiohttp.ClientSession() as http:
            streams = [
                asyncio.create_task(envoy.exchange(CHAT, stream(STREAM_TOKENS))) for _ in range(4)
            ]
            async with asyncio.timeout(20):
                while await running(http, metrics_port) < 4:
                    await asyncio.sleep(0.05)
            assert not any(s.done() for s in streams)
            loop = asyncio.get_running_loop()
            signalled = loop.time()
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(2):  # NOT_SERVING at once
                while await readiness(health_port) != health_pb2.HealthCheckResponse.NOT_SERVING:
                    await asyncio.sleep(0.02)
            late = await envoy.exchange(CHAT, stream(3))  # what still arrives is served
            assert late.status == 200 and b"[DONE]" in late.response_body
            async with asyncio.timeout(60):
                outs = await asyncio.gather(*streams)
        assert loop.time() - signalled > 5.0  # the old hard-coded grace would have cut them
        for out in outs:
            assert out.status == 200
            assert out.response_body.rstrip().endswith(b"data: [DONE]")
        async with asyncio.timeout(30):
            assert await process.wait() == 0
        assert process.stderr is not None
        log = (await process.stderr.read()).decode()
        assert "igw picker: drained in" in log, log
        assert "waited for 4 in flight, 4 finished, 0 cut at the grace period" in log, log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_the_drain_timeout_bounds_the_wait_and_says_what_it_cut(
    fleet: EmulatedFleet, tmp_path: Path
) -> None:
    endpoints = tmp_path / "endpoints.yaml"
    fleet.write_endpoints(endpoints)
    process, port, _, metrics_port = await start_picker(endpoints, 0.5)
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy, aiohttp.ClientSession() as http:
            long = asyncio.create_task(envoy.exchange(CHAT, stream(20_000)))
            async with asyncio.timeout(20):
                while await running(http, metrics_port) < 1:
                    await asyncio.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):
                assert await process.wait() == 0
            long.cancel()
            await asyncio.gather(long, return_exceptions=True)
        assert process.stderr is not None
        log = (await process.stderr.read()).decode()
        assert "waited for 1 in flight, 0 finished, 1 cut at the grace period" in log, log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
