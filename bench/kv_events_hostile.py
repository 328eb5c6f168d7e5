"""Benchmark: what a hostile KV-event publisher costs `igw serve` (issue 31, finding 6).

Starts `igw serve` as a child process over one quiet pod whose scrape reports 26,307
KV blocks (an H100 pod of Llama-3.1-8B) and whose `igw.dev/kv-events` label points at a
PUB socket this process binds on loopback. After a warm-up, the publisher sends for
`--seconds`, every 0.3 s, rounds of: a `BlockStored` of 1,000,000 small hashes packed
in 3 MB (under the picker's message cap, so it is read), a batch of 20,000 new blocks,
and 1,000,000 64-bit hashes in 9 MB (the issue's batch; over the cap, it ends the
connection, which the subscriber opens again 0.2 s later, ready for the next round).
Meanwhile `/health` is asked every 10 ms (its latency is how long the event loop was
held) and the child's RSS sampled.

Reported per tree: `/health` worst and p99 (ms), RSS idle and peak (MB), and the blocks
the index holds for the pod afterwards. Must hold: worst `/health` under 100 ms and RSS
within 64 MB of idle. `--src DIR` runs another tree's `gateway_src` (e.g. an export of
main) in the same run, first, so before and after are measured side by side.

    python bench/kv_events_hostile.py [--seconds 5] [--src DIR] [--json]

A benchmark, not a test: latencies depend on the machine and what else runs on it
(tests/e2e/test_kv_events_hostile.py holds the functional bounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
import zmq
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gateway_src"))

from inference_gateway.protocols.vllm.kv_events import (  # noqa: E402
    BlockStored,
    KVEventBatch,
    encode_batch,
)

BLOCKS = 26_307
METRICS = (
    "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n"
    f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{BLOCKS}"}} 1.0\n'
)


def batch(hashes: list[int]) -> bytes:
    event = BlockStored(hashes, None, [], 16, None, "GPU")
    return encode_batch(KVEventBatch(ts=1.0, events=[event], data_parallel_rank=0))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def quiet_pod() -> tuple[web.AppRunner, int]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=METRICS)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "llama-3.1-8b"}]})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


def attack(pub: zmq.Socket[Any], seq: list[int], seconds: float, stop: threading.Event) -> int:
    big = batch(list(range(1 << 62, (1 << 62) + 1_000_000)))
    packed = batch([200 + i % 60_000 for i in range(1_000_000)])
    sent, deadline, base = 0, time.monotonic() + seconds, 1 << 40
    while time.monotonic() < deadline and not stop.is_set():
        within = batch(list(range(base, base + 20_000)))
        base += 20_000
        for payload in (packed, within, big):  # the last ends the connection: reopened
            pub.send_multipart((b"kv", seq[0].to_bytes(8, "big"), payload), copy=False)
            seq[0] += 1
            sent += 1
        time.sleep(0.3)  # the subscriber reopens after 0.2 s
    return sent


async def metric(client: aiohttp.ClientSession, url: str, name: str) -> float:
    async with client.get(url + "/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(name):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def measure(src: Path, seconds: float) -> dict[str, Any]:
    pod, pod_port = await quiet_pod()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    address = f"tcp://127.0.0.1:{pub.bind_to_random_port('tcp://127.0.0.1')}"
    seq = [0]
    with tempfile.TemporaryDirectory() as tmp:
        endpoints = Path(tmp) / "endpoints.yaml"
        labels = {"igw.dev/pool": "p", "igw.dev/kv-events": address}
        pods = [{"name": "pod-0", "address": "127.0.0.1", "port": pod_port, "labels": labels}]
        endpoints.write_text(yaml.safe_dump({"endpoints": pods}))
        port = free_port()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src / "gateway_src"), str(src)]))
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            "import sys; from inference_gateway.cli.main import main; sys.exit(main())",
            "serve", "--endpoints", str(endpoints), "--port", str(port),
            env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as client:
                for _ in range(300):
                    try:
                        async with client.get(url + "/health") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.1)
                for i in range(200):  # warm-up: until the subscriber hears the pod
                    pub.send_multipart((b"kv", seq[0].to_bytes(8, "big"), batch([i + 1])))
                    seq[0] += 1
                    await asyncio.sleep(0.05)
                    if await metric(client, url, 'igw_kv_index_blocks{pod="pod-0"}') > 0:
                        break
                await asyncio.sleep(0.5)
                idle = rss_mb(child.pid)
                stop = threading.Event()
                sender = asyncio.get_running_loop().run_in_executor(
                    None, attack, pub, seq, seconds, stop
                )
                latencies: list[float] = []
                peak = idle
                while not sender.done():
                    started = time.monotonic()
                    async with client.get(url + "/health") as r:
                        await r.read()
                    latencies.append(time.monotonic() - started)
                    peak = max(peak, rss_mb(child.pid))
                    await asyncio.sleep(0.01)
                sent = await sender
                await asyncio.sleep(1.0)
                peak = max(peak, rss_mb(child.pid))
                blocks = await metric(client, url, 'igw_kv_index_blocks{pod="pod-0"}')
        finally:
            child.kill()
            await child.wait()
            await pod.cleanup()
            ctx.destroy(linger=0)
    latencies.sort()
    return {
        "src": str(src),
        "batches_sent": sent,
        "health_probes": len(latencies),
        "health_worst_ms": round(latencies[-1] * 1000, 1),
        "health_p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1),
        "rss_idle_mb": round(idle, 1),
        "rss_peak_mb": round(peak, 1),
        "rss_growth_mb": round(peak - idle, 1),
        "index_blocks": blocks,
        "must_hold": {
            "health_worst_under_100_ms": latencies[-1] < 0.1,
            "rss_within_64_mb_of_idle": peak - idle <= 64,
        },
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs = {}
    if args.src:
        runs["before"] = await measure(Path(args.src).resolve(), args.seconds)
    runs["this tree"] = await measure(ROOT, args.seconds)
    return {"seconds": args.seconds, "pod_blocks": BLOCKS, "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--src", help="another source tree, measured first in the same run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out))
        return 0
    for name, run in out["runs"].items():
        print(
            f"{name:>10}: /health worst {run['health_worst_ms']} ms, p99 {run['health_p99_ms']}"
            f" ms over {run['health_probes']} probes; RSS {run['rss_idle_mb']} -> "
            f"{run['rss_peak_mb']} MB (+{run['rss_growth_mb']}); index {run['index_blocks']:.0f}"
            f" blocks (pod reports {BLOCKS}); {run['batches_sent']} batches sent"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
