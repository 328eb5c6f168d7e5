"""`GET /status` of a real `igw serve` process whose only pod is down (issue 23, item 8):
the cluster-wide `kvUsage` is the pools' figure (0.0 with no ready pod), not 1.0."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from inference_gateway.shared_store.local_server import free_port


async def _status(url: str, log: Path, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as s:
        while True:
            assert process.poll() is None, log.read_text()[-2000:]
            try:
                async with s.get(url, timeout=aiohttp.ClientTimeout(2)) as r:
                    if r.status == 200:
                        return dict(await r.json())
            except (aiohttp.ClientError, TimeoutError):
                pass
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            await asyncio.sleep(0.1)


async def test_no_ready_pod_reports_the_pools_kv_usage(tmp_path: Path) -> None:
    labels = {"igw.dev/pool": "p", "igw.dev/model": "m"}
    pod = {"name": "p-0", "address": "127.0.0.1", "port": free_port(), "labels": labels}
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"endpoints": [pod]}))
    port = free_port()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "inference_gateway.cli", "serve", "--endpoints"]
    command += [str(endpoints), "--emf-cluster", "c1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        status = await _status(f"http://127.0.0.1:{port}/status", log, process)
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert status["readyPods"] == 0
    assert status["kvUsage"] == 0.0 == status["pools"]["p"]["kvUsage"]
