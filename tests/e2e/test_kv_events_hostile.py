"""A hostile KV-event publisher against a real `igw serve` (issue 31, finding 6).

Before: one `BlockStored` of 1,000,000 hashes (9 MB) held `igw serve`'s event loop for
1.7 s (`/health` worst 1,687 ms) and took its RSS from 65 to 482 MB for a pod that
reports 26,307 blocks, trimmed only when that pod was next picked.

Here the pod's scrape reports 26,307 blocks and its publisher (a PUB socket bound on
loopback, what the picker's label points at) sends, as fast as it can: batches of
20,000 new blocks (each within one step's reach, together past the pod's capacity), a
million hashes in 3 MB (under the message cap: refused by the index), and a million
64-bit hashes in 9 MB (over the cap: never received). No request is ever routed, so
nothing but the events path can bound the index. Meanwhile `/health` is asked every
10 ms and the RSS sampled. Must hold: the index holds at most the pod's capacity, the
RSS stays within 64 MB of its idle value, the loop keeps answering. The worst `/health`
latency is bounded here only functionally (under 0.5 s, against 1.7 s before); its
goal (under 100 ms) is measured by `bench/kv_events_hostile.py`.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import zmq

from .serve_process import ServeProcess, igw_serve

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from kv_events_hostile import BLOCKS, batch, quiet_pod


class Publisher:
    """A PUB socket on loopback sending `[topic, seq, payload]` as vLLM frames them."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.seq = 0

    def send(self, payload: bytes) -> None:
        self.pub.send_multipart((b"kv", self.seq.to_bytes(8, "big"), payload), copy=False)
        self.seq += 1

    def close(self) -> None:
        self.ctx.destroy(linger=0)


async def metric(client: aiohttp.ClientSession, served: ServeProcess, name: str) -> float:
    async with client.get(served.url + "/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def payloads() -> tuple[list[bytes], bytes, bytes]:
    """Built before the clock starts (encoding a million hashes holds this process)."""
    bases = range(1 << 40, (1 << 40) + 8 * 20_000, 20_000)
    within = [batch(list(range(base, base + 20_000))) for base in bases]
    small_million = batch([200 + i % 60_000 for i in range(1_000_000)])  # 3 MB
    big_million = batch(list(range(1 << 62, (1 << 62) + 1_000_000)))  # 9 MB
    assert len(small_million) < 4 << 20 < len(big_million)
    return within, small_million, big_million


def attack(publisher: Publisher, sent: tuple[list[bytes], bytes, bytes]) -> None:
    within, small_million, big_million = sent
    for payload in within[:4]:
        publisher.send(payload)
        publisher.send(small_million)
        time.sleep(0.05)
    for payload in within[4:]:
        publisher.send(big_million)
        time.sleep(0.25)  # the subscriber reopens its connection
        publisher.send(payload)


async def test_a_hostile_publisher_leaves_the_index_memory_and_loop_bounded(
    tmp_path: Path,
) -> None:
    publisher = Publisher()
    pod, port = await quiet_pod()
    try:
        async with (
            igw_serve(
                tmp_path, [port], labels=[{"igw.dev/kv-events": publisher.address}]
            ) as served,
            aiohttp.ClientSession() as client,
        ):
            await run(publisher, served, client)
    finally:
        await pod.cleanup()
        publisher.close()


async def run(publisher: Publisher, served: ServeProcess, client: aiohttp.ClientSession) -> None:
    blocks = 'igw_kv_index_blocks{pod="pod-0"}'
    for i in range(100):  # until the subscriber hears the pod
        publisher.send(batch([i + 1]))
        await asyncio.sleep(0.05)
        if await metric(client, served, blocks) > 0:
            break
    sent = payloads()
    idle = served.rss_kib()
    sender = threading.Thread(target=attack, args=(publisher, sent), daemon=True)
    worst, peak = 0.0, idle
    sender.start()
    until = None
    while until is None or time.monotonic() < until:
        if until is None and not sender.is_alive():
            until = time.monotonic() + 0.5
        started = time.monotonic()
        async with client.get(served.url + "/health") as r:
            await r.read()
        worst = max(worst, time.monotonic() - started)
        peak = max(peak, served.rss_kib())
        await asyncio.sleep(0.01)
    sender.join()
    held: dict[str, Any] = {
        "blocks": await metric(client, served, blocks),
        "refused": await metric(client, served, "igw_kv_events_refused_total"),
        "reconnects": await metric(client, served, "igw_kv_events_reconnects_total"),
    }
    assert 20_000 <= held["blocks"] <= BLOCKS, held
    assert held["refused"] >= 1 and held["reconnects"] >= 1, held
    assert peak - idle <= 64 * 1024, f"RSS {idle} -> {peak} KiB"
    assert worst < 0.5, f"/health took {worst:.3f} s"
