"""Priority bands under 2x overload on loopback (a benchmark, not a test).

An emulated fleet (`igw emulate --fleet`) and the gateway (`igw serve`) run in their own
processes; this client streams requests with `x-gateway-inference-objective` headers for
three bands (10 % critical, 60 % standard, 30 % sheddable), first at 0.3x and then at 2x
the fleet's capacity for this request shape (capacity from the simulator's probe of the
same engine model). Reported per band and load: P99 TTFT of completed requests, and
429 / 503 counts. The claim: critical P99 under 2x stays within 1.5x of its unloaded P99
while sheddable requests absorb the rejections.

Run: `.venv/bin/python bench/overload_loopback.py [--seconds 30] [--json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import yaml

from inference_gateway.sim.capacity import pod_capacity
from inference_gateway.sim.scenario import Fixed, PoissonArrival, PoolSpec, Workload

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_overhead import free_port, scratch_folder, wait_ready

PODS = 2
PROMPT_TOKENS = 2000
OUTPUT_TOKENS = 16
BANDS = {
    "critical": ("interactive", 0.1),
    "standard": ("default", 0.6),
    "sheddable": ("batch", 0.3),
}


def capacity_rps() -> float:
    workload = Workload(
        arrival=PoissonArrival(kind="poisson", load=1.0),
        prompt_tokens=Fixed(dist="fixed", value=PROMPT_TOKENS),
        output_tokens=Fixed(dist="fixed", value=OUTPUT_TOKENS),
    )
    pool = PoolSpec(name="h100", gpu="H100", model="llama-3.1-8b", replicas=PODS)
    return pod_capacity(pool, workload, 1) * PODS


async def drive(url: str, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    rnd = random.Random(seed)
    ttft: dict[str, list[float]] = {b: [] for b in BANDS}
    status: Counter[str] = Counter()
    names = list(BANDS)
    weights = [BANDS[b][1] for b in names]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(band: str, i: int) -> None:
            # distinct across load levels too: a prompt cached by the unloaded run would
            # make the overloaded one look cheaper than it is
            prompt = f"request {seed}-{i} " + "lorem ipsum " * (PROMPT_TOKENS * 4 // 12)
            body = {
                "model": "llama-3.1-8b",
                "prompt": prompt,
                "max_tokens": OUTPUT_TOKENS,
                "stream": True,
            }
            headers = {"x-gateway-inference-objective": BANDS[band][0]}
            sent = time.perf_counter()
            async with session.post(url + "/v1/completions", json=body, headers=headers) as r:
                if r.status != 200:
                    status[f"{band}:{r.status}"] += 1
                    await r.read()
                    return
                first = None
                async for line in r.content:
                    if first is None and line.startswith(b"data: "):
                        first = time.perf_counter() - sent
                ttft[band].append(first if first is not None else time.perf_counter() - sent)
                status[f"{band}:200"] += 1

        tasks, t, start, i = [], 0.0, time.perf_counter(), 0
        while True:
            t += rnd.expovariate(rate)
            if t >= seconds:
                break
            await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
            band = rnd.choices(names, weights)[0]
            tasks.append(asyncio.create_task(one(band, i)))
            i += 1
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=seconds + 180)
    return {
        "offered_rps": rate,
        "requests": i,
        "ttft_p99_s": {b: float(np.percentile(v, 99)) if v else None for b, v in ttft.items()},
        "status": dict(sorted(status.items())),
    }


async def run(seconds: float) -> dict[str, Any]:
    with scratch_folder("igw-overload-") as folder:
        return await _run(folder, seconds)


async def _run(folder: Path, seconds: float) -> dict[str, Any]:
    base = free_port()
    (folder / "fleet.yaml").write_text(
        yaml.safe_dump(
            {
                "base_port": base,
                "pods": [
                    {"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": PODS}
                ],
            }
        )
    )
    (folder / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "pools": [{"name": "h100"}],
                "models": [{"name": "llama-3.1-8b", "pool": "h100"}],
                "objectives": [
                    {"name": "interactive", "priority": 10},
                    {"name": "default", "priority": 0},
                    {"name": "batch", "priority": -1},
                ],
            }
        )
    )
    port = free_port()
    igw = [sys.executable, "-m", "inference_gateway.cli.main"]
    fleet = subprocess.Popen(
        [
            *igw,
            "emulate",
            "--fleet",
            str(folder / "fleet.yaml"),
            "--write-endpoints",
            str(folder / "endpoints.yaml"),
        ],
        stdout=subprocess.DEVNULL,
    )
    gateway = None
    try:
        for _ in range(300):
            if (folder / "endpoints.yaml").exists():
                break
            time.sleep(0.1)
        gateway = subprocess.Popen(
            [
                *igw,
                "serve",
                "--endpoints",
                str(folder / "endpoints.yaml"),
                "--config",
                str(folder / "config.yaml"),
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, url + "/health")
        capacity = capacity_rps()
        unloaded = await drive(url, 0.3 * capacity, seconds, seed=1)
        await asyncio.sleep(3)
        overload = await drive(url, 2.0 * capacity, seconds, seed=2)
    finally:
        for process in (gateway, fleet):
            if process is not None:
                process.terminate()
                process.wait(timeout=10)
    critical = overload["ttft_p99_s"]["critical"] / unloaded["ttft_p99_s"]["critical"]
    return {
        "capacity_rps": capacity,
        "unloaded": unloaded,
        "overload_2x": overload,
        "critical_p99_ratio": critical,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per load level")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.seconds))
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print(
        f"capacity {result['capacity_rps']:.1f} req/s ({PODS} emulated H100, "
        f"{PROMPT_TOKENS}-token prompts, {OUTPUT_TOKENS} output tokens)"
    )
    for name in ("unloaded", "overload_2x"):
        r = result[name]
        print(f"{name:12} offered {r['offered_rps']:.1f} req/s, {r['requests']} requests")
        print(f"  P99 TTFT s: {r['ttft_p99_s']}")
        print(f"  status:     {r['status']}")
    print(f"critical P99 under 2x / unloaded = {result['critical_p99_ratio']:.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
