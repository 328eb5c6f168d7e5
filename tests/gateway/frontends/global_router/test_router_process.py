"""`igw global` as a process under the servers' one set of rules (issue 23, defect 7):
a body trickler gets 408 and a closed connection at `--body-timeout` (it used to hold a
handler for as long as it liked), and SIGHUP drains like SIGTERM (streams in flight
finish, one line says how many were waited for, exit 0) instead of killing the process.
The clusters are the aiohttp doubles of conftest.py."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import yaml

from .conftest import FakeCluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_router(
    tmp_path: Path, clusters: list[FakeCluster], *flags: str
) -> tuple[asyncio.subprocess.Process, int]:
    config = {
        "homeRegion": "r1",
        "pollIntervalMs": 100,
        "staleAfterMs": 2000,
        "rampS": 0,
        "clusters": [
            {"name": c.name, "region": "r1", "endpoint": c.url, "hourlyCostUsd": 10.0}
            for c in clusters
        ],
    }
    path = tmp_path / "global.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; from inference_gateway.cli.main import main; sys.exit(main())",
        "global",
        "--config",
        str(path),
        "--port",
        str(port),
        *flags,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    async with aiohttp.ClientSession() as client:
        while True:
            assert process.returncode is None, "igw global exited"
            try:
                async with client.get(f"http://127.0.0.1:{port}/health") as r:
                    if r.status == 200:
                        return process, port
            except aiohttp.ClientConnectionError:
                pass
            assert time.monotonic() < deadline, "igw global did not come up"
            await asyncio.sleep(0.1)


async def test_a_body_trickler_gets_408_at_the_body_deadline(
    tmp_path: Path, fake_clusters: list[FakeCluster]
) -> None:
    process, port = await start_router(tmp_path, fake_clusters, "--body-timeout", "1")
    try:
        body = orjson.dumps({"model": "m", "prompt": "x" * 100})
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body)
        )
        started = time.monotonic()

        async def feed() -> None:  # one body byte every 100 ms, never the whole body
            for i in range(len(body)):
                writer.write(body[i : i + 1])
                await asyncio.sleep(0.1)

        # The answer is read while the body is fed, not between feeds: a close with body
        # bytes unread reaches the client as a reset, and a StreamReader that holds the
        # reset raises it before the 408 it buffered.
        feeding = asyncio.create_task(feed())
        answer = b""
        try:
            async with asyncio.timeout(6):
                while chunk := await reader.read(4096):  # until the router closes
                    answer += chunk
        except ConnectionError:  # reset: closed with body bytes unread
            pass
        feeding.cancel()
        writer.close()
        assert time.monotonic() - started < 4
        assert answer.startswith(b"HTTP/1.1 408"), answer[:60]
        assert sum(sum(c.hits.values()) for c in fake_clusters) == 0
    finally:
        process.kill()
        await process.wait()


async def test_sighup_drains_the_streams_in_flight(
    tmp_path: Path, fake_clusters: list[FakeCluster]
) -> None:
    for cluster in fake_clusters:
        cluster.stream_mode = "slow"  # 30 chunks 200 ms apart
    process, port = await start_router(tmp_path, fake_clusters)
    try:
        async with aiohttp.ClientSession() as client:
            data = orjson.dumps({"model": "m", "prompt": "hi", "stream": True})
            streams = [
                await client.post(f"http://127.0.0.1:{port}/v1/completions", data=data)
                for _ in range(8)
            ]
            for r in streams:
                assert r.status == 200
                await r.content.readuntil(b"\n\n")
            process.send_signal(signal.SIGHUP)
            for r in streams:
                rest = await asyncio.wait_for(r.content.read(), 15)
                assert rest.endswith(b"data: [DONE]\n\n")
                r.close()
        assert await asyncio.wait_for(process.wait(), 15) == 0
        assert process.stderr is not None
        log = (await process.stderr.read()).decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "igw global: SIGHUP received" in log
    assert "waited for 8 in flight, 8 finished, 0 cut" in log
    assert "Traceback" not in log
