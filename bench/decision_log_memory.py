"""The decision log's memory: what a picker replica holds so `igw explain` answers for
any of its last 10,000 requests (a benchmark, not a test).

Real requests through the director (the `latency` profile over `--pods` endpoints with
varied metrics, a few stale, so records carry scores, predictions and exclusions) end
their lifecycles into a `DecisionLog(10_000)`; `tracemalloc` measures what the ring
holds after 10,000 and after 30,000 requests (it must not grow: the ring drops its
oldest), and what each request's recording costs in CPU, with the log and without.

    .venv/bin/python bench/decision_log_memory.py [--pods 64] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from typing import Any

import orjson

from inference_gateway.assembly.core import build_core
from inference_gateway.core.request.decisions import DecisionLog
from inference_gateway.core.scheduling.types import Endpoint, PodMetrics

BODY = orjson.dumps({"model": "m", "prompt": "hello " * 40, "max_tokens": 1})
USAGE = b'{"usage":{"prompt_tokens":60,"completion_tokens":1}}'


async def drive(pods: int, requests: int, log: DecisionLog | None) -> float:
    """Run `requests` through a director whose log is `log`; seconds per request."""
    endpoints = [
        Endpoint(
            f"vllm-llama-8b-{i:03d}-7c9f",
            "10.0.0.1",
            8000 + i,
            pool="default",
            metrics=PodMetrics(waiting=i % 5, running=i % 7, kv_usage=(i % 10) / 10),
            stale=i % 16 == 0,
            models=frozenset({"m"}),
        )
        for i in range(pods)
    ]
    core = build_core(endpoints, None, scrape=False)
    director = core.director
    director.decisions = log
    director.explaining = log is not None
    headers = {"content-type": "application/json", "x-request-id": "0" * 32}
    started = time.perf_counter()
    for _ in range(requests):
        life = await director.decide(BODY, headers, client_request_id=headers["x-request-id"])
        life.picked(life.decision.ranked[0])
        life.answered(200, False)
        life.first_byte()
        life.chunk(USAGE)
        life.finished()
    seconds = (time.perf_counter() - started) / requests
    await core.close()
    return seconds


def measure(pods: int) -> dict[str, Any]:
    log = DecisionLog(10_000)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    asyncio.run(drive(pods, 10_000, log))
    gc.collect()
    after_10k = tracemalloc.take_snapshot()
    held_10k = sum(s.size_diff for s in after_10k.compare_to(before, "filename"))
    asyncio.run(drive(pods, 20_000, log))
    gc.collect()
    after_30k = tracemalloc.take_snapshot()
    held_30k = sum(s.size_diff for s in after_30k.compare_to(before, "filename"))
    tracemalloc.stop()
    with_log = asyncio.run(drive(pods, 3000, DecisionLog(10_000)))
    without = asyncio.run(drive(pods, 3000, None))
    return {
        "pods": pods,
        "records": len(log),
        "held_after_10k_bytes": held_10k,
        "held_after_30k_bytes": held_30k,
        "bytes_per_record": round(held_30k / len(log)),
        "record_payload_bytes_per_record": round(log.nbytes() / len(log)),
        "cpu_us_per_request_with_log": round(with_log * 1e6, 1),
        "cpu_us_per_request_without_log": round(without * 1e6, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.pods)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"decision log, {result['records']} records kept, {args.pods}-pod pool")
    print(
        f"  held: {result['held_after_10k_bytes'] / 2**20:.1f} MiB after 10,000 requests, "
        f"{result['held_after_30k_bytes'] / 2**20:.1f} MiB after 30,000 "
        f"({result['bytes_per_record']} B a record, {result['record_payload_bytes_per_record']} B "
        "of it the record itself)"
    )
    print(
        f"  CPU per request: {result['cpu_us_per_request_with_log']} us with the log, "
        f"{result['cpu_us_per_request_without_log']} us without"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
