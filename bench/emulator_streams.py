"""Benchmark: can one `igw emulate --fleet` process serve a 16-pod fleet's streams?

Starts `igw emulate --fleet` with N pods in one child process (so its CPU time is measured
apart from this client's), then drives `--concurrency` simultaneous streaming chat
requests through it with aiohttp, round-robin over the pods, until `--requests` have been
sent. Reports completed streams, output tokens/s, client-observed TTFT p50/p99 next to
the TTFT the engines modelled (from their `/metrics` histograms: if the process keeps up,
the two agree), and the CPU time of the fleet process and of the client.

    python bench/emulator_streams.py [--pods 16] [--concurrency 200] [--requests 600]

A benchmark, not a test: figures depend on the machine; compare ratios, not absolutes.
The gap between client-observed and modelled TTFT is event-loop lag (this process's
work, or other processes competing for the CPUs: the load average is printed too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Results:
    ttft: list[float] = field(default_factory=list)
    tokens: int = 0
    completed: int = 0
    failed: int = 0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def start_fleet(
    pods: int, gpu: str, workdir: Path
) -> tuple[asyncio.subprocess.Process, list[str]]:
    fleet = {
        "base_port": 0,
        "pods": [{"name": "pod", "gpu": gpu, "model": "llama-3.1-8b", "replicas": pods}],
    }
    fleet_path, endpoints_path = workdir / "fleet.yaml", workdir / "endpoints.yaml"
    fleet_path.write_text(yaml.safe_dump(fleet))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "inference_gateway.cli.main", "emulate",
        "--fleet", str(fleet_path), "--write-endpoints", str(endpoints_path),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    async with asyncio.timeout(60):
        while "ready" not in (line := (await process.stdout.readline()).decode()):
            if not line:
                raise RuntimeError("igw emulate exited before it was ready")
    endpoints = yaml.safe_load(endpoints_path.read_text())["endpoints"]
    return process, [f"http://{e['address']}:{e['port']}" for e in endpoints]


async def one_stream(
    session: aiohttp.ClientSession, url: str, i: int, max_tokens: int, results: Results
) -> None:
    body = {
        "model": "llama-3.1-8b",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. " * 20},
            {"role": "user", "content": f"Question number {i}: " + "tell me more. " * 40},
        ],
        "max_tokens": max_tokens,
        "stream": True,
    }
    start = time.monotonic()
    first = None
    tokens = 0
    pending = b""
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            # Count token events in raw chunks (complete events only): parsing SSE line by
            # line would make this client, not the fleet, the bottleneck.
            async for data in response.content.iter_any():
                complete, _, pending = (pending + data).rpartition(b"\n\n")
                found = complete.count(b'"delta":{"content":"')
                if found:
                    tokens += found
                    if first is None:
                        first = time.monotonic() - start
    except aiohttp.ClientError:
        results.failed += 1
        return
    if first is not None and tokens == max_tokens:
        results.completed += 1
        results.ttft.append(first)
        results.tokens += tokens
    else:
        results.failed += 1


async def modelled_ttft(session: aiohttp.ClientSession, urls: list[str]) -> tuple[float, int]:
    """Mean TTFT the engines modelled, from their histograms' sum and count."""
    total, count = 0.0, 0
    for url in urls:
        async with session.get(f"{url}/metrics") as response:
            text = await response.text()
        for family in text_string_to_metric_families(text):
            if family.name == "vllm:time_to_first_token_seconds":
                for sample in family.samples:
                    if sample.name.endswith("_sum"):
                        total += sample.value
                    elif sample.name.endswith("_count"):
                        count += int(sample.value)
    return (total / count if count else float("nan")), count


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        process, urls = await start_fleet(args.pods, args.gpu, Path(tmp))
        try:
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                # Warm up: the client's first connection builds SSL contexts (~0.2 s of
                # blocked loop), which would otherwise be charged to the first streams' TTFT.
                for url in urls:
                    async with session.get(f"{url}/health") as response:
                        response.raise_for_status()
                results = Results()
                queue = iter(range(args.requests))
                cpu0, client0, wall0 = (
                    process_cpu_s(process.pid),
                    time.process_time(),
                    time.monotonic(),
                )

                async def worker(delay: float) -> None:
                    await asyncio.sleep(delay)  # ramp up: no thundering herd of connects
                    for i in queue:
                        await one_stream(session, urls[i % len(urls)], i, args.max_tokens, results)

                ramp = args.ramp_s / args.concurrency
                await asyncio.gather(*(worker(n * ramp) for n in range(args.concurrency)))
                wall = time.monotonic() - wall0
                load = os.getloadavg()[0]  # other work on the machine delays streams too
                server_cpu = process_cpu_s(process.pid) - cpu0
                client_cpu = time.process_time() - client0
                mean_model, counted = await modelled_ttft(session, urls)
        finally:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await process.wait()
            if process.returncode is None:
                process.kill()
    ms = 1e3
    p50, p99 = percentile(results.ttft, 0.5) * ms, percentile(results.ttft, 0.99) * ms
    mean = statistics.fmean(results.ttft) * ms if results.ttft else float("nan")
    rows = [
        ("pods / concurrency / requests", f"{args.pods} x {args.gpu} / {args.concurrency} / "
         f"{args.requests} (ramp {args.ramp_s:g} s)"),
        ("completed streams / failed", f"{results.completed} / {results.failed}"),
        ("wall time", f"{wall:.2f} s"),
        ("output tokens/s (all pods)", f"{results.tokens / wall:,.0f}"),
        ("TTFT p50 / p99 (client)", f"{p50:.1f} / {p99:.1f} ms"),
        ("TTFT mean client / modelled", f"{mean:.1f} / {mean_model * ms:.1f} ms ({counted} reqs)"),
        ("fleet process CPU", f"{server_cpu:.2f} s ({server_cpu / wall:.2f} cores)"),
        ("client CPU", f"{client_cpu:.2f} s ({client_cpu / wall:.2f} cores)"),
        ("machine", f"{os.cpu_count()} CPUs, load average {load:.1f} during the run"),
    ]  # fmt: skip
    if args.json:  # the `make bench` report reads this
        figures = {
            "pods": args.pods,
            "concurrency": args.concurrency,
            "requests": args.requests,
            "completed": results.completed,
            "failed": results.failed,
            "wall_s": wall,
            "output_tokens_per_s": results.tokens / wall,
            "ttft_p50_ms": p50,
            "ttft_p99_ms": p99,
            "ttft_mean_modelled_ms": mean_model * ms,
            "fleet_cpu_s": server_cpu,
            "client_cpu_s": client_cpu,
            "load_average": load,
        }
        print(json.dumps(figures))
        return
    width = max(len(k) for k, _ in rows)
    for key, val in rows:
        print(f"{key:<{width}}  {val}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=16)
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--ramp-s", type=float, default=1.0, help="stagger stream starts")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(args))
    else:
        uvloop.run(run(args))


if __name__ == "__main__":
    main()
