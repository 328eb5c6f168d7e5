"""A slow pod among many: how old the other pods' views get (a benchmark, not a test).

`--pods` zero-delay pods on loopback (one aiohttp process) answer a small vLLM page at
once, except pod 0 in two of the three cases, side by side in one run:

* `none`: no pod is slow (the reference);
* `slow`: pod 0 answers `/metrics` after `--slow-ms` (an API server busy tokenizing);
* `silent`: pod 0 accepts and never answers (its scrapes are cut at the deadline).

The endpoint store runs over them with the real scrape client (`ScrapeClient`), its
`--interval-ms`, a 1 s deadline and no CPU budget, and samples the oldest view among the
other pods every 10 ms for `--seconds`. Reported per case: that age's p50 and max, and
rounds a second. The claim (`EndpointStore.run`): a slow pod ages its own view only, so
`slow` and `silent` read within noise of `none`. Until 2026-12-08 a round waited for its
slowest answer, and the other views aged with the slow pod's (406 ms at `--slow-ms 400`,
1,001 ms silent, at a 50 ms interval).

Run: `.venv/bin/python bench/slow_pod.py [--json] [--pods 32] [--slow-ms 400]
[--interval-ms 50] [--seconds 3]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_overhead import free_port, wait_ready, zero_delay_pod

from inference_gateway.assembly.core import ScrapeClient
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.scheduling.types import Endpoint

NEVER = -1.0  # pod 0's delay when it never answers
CASES = {"none": 0.0, "slow": None, "silent": NEVER}  # None: --slow-ms


def serve_pods(ports: list[int], delay_s: float) -> None:
    """Child: a zero-delay pod a port (`gateway_overhead.zero_delay_pod`); pod 0 answers
    `/metrics` after `delay_s` (never when negative)."""
    from aiohttp import web

    async def main() -> None:
        for i, port in enumerate(ports):
            app = zero_delay_pod(delay_s if i == 0 else 0.0)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    asyncio.run(main())


async def one_case(delay_s: float, args: argparse.Namespace) -> dict[str, Any]:
    ports = [free_port() for _ in range(args.pods)]
    argv = [sys.executable, __file__, "--serve", json.dumps(ports), "--delay-s", str(delay_s)]
    fleet = subprocess.Popen(argv)
    client = ScrapeClient(1.0)
    try:
        async with aiohttp.ClientSession() as session:
            for port in ports:
                await wait_ready(session, f"http://127.0.0.1:{port}/v1/models")
        pods = [Endpoint(f"pod-{i}", "127.0.0.1", port, pool="p") for i, port in enumerate(ports)]
        store = EndpointStore(
            pods,
            client,
            interval_s=args.interval_ms / 1000,
            timeout_s=1.0,
            staleness_s=30.0,
            max_cpu_fraction=None,
        )
        store.start()
        try:
            await asyncio.sleep(1.0)  # every pod scraped, pod 0 slow from here on
            loop = asyncio.get_running_loop()
            rounds, ages = store.scrapes, []
            began = loop.time()
            while loop.time() - began < args.seconds:
                await asyncio.sleep(0.01)
                now = store.clock()
                ages.append(max(now - e.scraped_at for e in pods[1:]))
            rounds_per_s = (store.scrapes - rounds) / (loop.time() - began)
        finally:
            await store.stop()
    finally:
        await client.close()
        fleet.kill()
        fleet.wait(timeout=10)
    ms = np.asarray(ages) * 1000
    return {
        "others_view_age_p50_ms": float(np.percentile(ms, 50)),
        "others_view_age_max_ms": float(ms.max()),
        "rounds_per_s": rounds_per_s,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cases = {}
    for name, delay_s in CASES.items():
        cases[name] = await one_case(args.slow_ms / 1000 if delay_s is None else delay_s, args)
    reference = cases["none"]["others_view_age_max_ms"]
    return {
        "pods": args.pods,
        "interval_ms": args.interval_ms,
        "slow_ms": args.slow_ms,
        "cases": cases,
        "max_ratio_to_none": {
            name: cases[name]["others_view_age_max_ms"] / reference for name in ("slow", "silent")
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=32)
    parser.add_argument("--slow-ms", type=float, default=400.0)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--delay-s", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_pods(json.loads(args.serve), args.delay_s)
        return 0
    if args.pods < 2:
        parser.error("needs --pods >= 2")
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{args.pods} pods, {args.interval_ms:g} ms interval, 1 s deadline: the other pods' "
        "oldest view while pod 0 is"
    )
    labels = {"none": "not slow", "slow": f"slow ({args.slow_ms:g} ms)", "silent": "silent"}
    for name, figures in result["cases"].items():
        print(
            f"  {labels[name]:16} p50 {figures['others_view_age_p50_ms']:6.0f} ms   max "
            f"{figures['others_view_age_max_ms']:6.0f} ms   {figures['rounds_per_s']:5.1f} "
            "rounds/s"
        )
    for name, ratio in result["max_ratio_to_none"].items():
        print(f"  {name} / not slow, max: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
