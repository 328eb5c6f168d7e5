"""`igw global` as a real process in front of fake cluster gateways on loopback (issue 23):
a client that leaves is cancelled at the cluster within 1 s, a header trickler is closed
at the header deadline, a client disconnect is one quiet log line (no traceback), and
`igw global drained` with an unreachable store fails loudly.

The fake clusters run in the test's event loop with handler cancellation, as `igw serve`
does, so they see a closed connection as a cancel. Every wait is bounded."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from inference_gateway.shared_store.local_server import free_port

from .conftest import FakeCluster

READY_S = 30.0


def _config(clusters: list[FakeCluster], **extra: Any) -> dict[str, Any]:
    return {
        "homeRegion": "r1",
        "pollIntervalMs": 200,
        "staleAfterMs": 5000,
        "rampS": 0,
        "clusters": [{"name": c.name, "region": "r1", "endpoint": c.url} for c in clusters],
        **extra,
    }


@asynccontextmanager
async def igw_global(
    tmp: Path, config: dict[str, Any], *flags: str
) -> AsyncIterator[tuple[str, Path]]:
    path = tmp / "global.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp / "global.log"
    command = [sys.executable, "-m", "inference_gateway.cli", "global", "--config", str(path)]
    command += ["--host", "127.0.0.1", "--port", str(port), *flags]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        async with aiohttp.ClientSession() as s:
            while True:
                assert process.poll() is None, log.read_text()[-3000:]
                try:
                    async with s.get(url + "/health", timeout=aiohttp.ClientTimeout(1)) as r:
                        if r.status == 200:
                            break
                except (aiohttp.ClientError, TimeoutError):
                    pass
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                await asyncio.sleep(0.1)
        yield url, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def test_a_client_that_leaves_is_cancelled_at_the_cluster_within_a_second(
    tmp_path: Path,
) -> None:
    cluster = await FakeCluster("a", answer_status=-1, hang_s=6.0).start(cancellation=True)
    try:
        async with igw_global(tmp_path, _config([cluster])) as (url, _):
            body = {"model": "m", "prompt": "hello", "max_tokens": 5}

            async def leave_after_one_second() -> float:
                async with aiohttp.ClientSession() as s:
                    try:
                        async with asyncio.timeout(1.0):
                            await s.post(url + "/v1/completions", json=body)
                    except TimeoutError:
                        pass  # the session closes the connection now: the client left
                return asyncio.get_running_loop().time()

            left = await asyncio.gather(*(leave_after_one_second() for _ in range(5)))
            deadline = asyncio.get_running_loop().time() + 3.0
            while len(cluster.cancelled_at) < 5 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            assert len(cluster.cancelled_at) == 5  # none ran to the end for nobody
            assert max(cluster.cancelled_at) - max(left) < 1.0
    finally:
        await cluster.stop()


async def test_a_header_trickler_is_closed_at_the_header_deadline(tmp_path: Path) -> None:
    cluster = await FakeCluster("a").start()
    try:
        async with igw_global(tmp_path, _config([cluster]), "--header-timeout", "1") as (url, _):
            port = int(url.rsplit(":", 1)[1])
            loop = asyncio.get_running_loop()
            socks = []
            for _ in range(10):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.setblocking(False)
                socks.append(sock)
            started = loop.time()
            head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "
            closed: set[int] = set()
            for i in range(60):  # one byte per 0.1 s per connection, 6 s at most
                for n, sock in enumerate(socks):
                    if n in closed:
                        continue
                    try:
                        sock.send(head[i % len(head) : i % len(head) + 1])
                        if sock.recv(1) == b"":
                            closed.add(n)
                    except BlockingIOError:
                        pass
                    except OSError:
                        closed.add(n)
                if len(closed) == len(socks):
                    break
                await asyncio.sleep(0.1)
            took = loop.time() - started
            for sock in socks:
                sock.close()
            assert len(closed) == len(socks), f"{len(closed)} of {len(socks)} closed"
            assert took < 4.0  # the 1 s deadline, on a loaded machine
    finally:
        await cluster.stop()


async def test_a_client_disconnect_is_not_a_traceback(tmp_path: Path) -> None:
    cluster = await FakeCluster("a", stream_mode="slow").start(cancellation=True)
    try:
        async with igw_global(tmp_path, _config([cluster])) as (url, log):
            body = {"model": "m", "prompt": "hello", "max_tokens": 5, "stream": True}

            async def read_one_chunk_and_leave() -> None:
                async with (
                    aiohttp.ClientSession() as s,
                    s.post(url + "/v1/completions", json=body) as r,
                ):
                    assert r.status == 200
                    await r.content.readany()  # then the session closes: gone

            await asyncio.gather(*(read_one_chunk_and_leave() for _ in range(20)))
            await asyncio.sleep(1.0)
            text = log.read_text()
            assert "Traceback" not in text and "Error handling request" not in text
    finally:
        await cluster.stop()


def test_drained_with_an_unreachable_store_exits_1(tmp_path: Path) -> None:
    config = {
        "clusters": [{"name": "a", "region": "r1", "endpoint": "http://127.0.0.1:1"}],
        "store": {"url": f"redis://127.0.0.1:{free_port()}/0", "timeoutMs": 200},
    }
    path = tmp_path / "global.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "inference_gateway.cli", "global", "drained"]
    done = subprocess.run(
        [*command, "--config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "store unreachable" in done.stderr
    assert "(empty)" not in done.stdout  # an unknown set is not an empty one
