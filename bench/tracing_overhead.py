"""Tracing's cost, side by side: `igw serve` and `igw picker` with tracing off and on.

1. `igw serve` (open loop, bench/gateway_overhead.py's zero-delay pod and way of
   starting gateways): the same requests, interleaved request by request, directly to
   the pod and through gateways that differ only in their `tracing` section: off
   without the decision log (`explain.recent: 0`), off (the default: the last 10,000
   decisions kept for `igw explain`), on at 10 % and at 100 % sampling, and, with
   `--baseline-src DIR`, a gateway from another source tree (a checkout from before
   tracing existed), so "off adds nothing" is measured against code without the
   tracing hooks in the same run. Reported: each gateway's added p50 / p99 over the
   direct path, and the differences that matter: off (no log) − baseline, the decision
   log's own cost (off − off no log), on 10 % − off.
2. `igw picker` (bench/picker_throughput.py's sequential phase: one ext_proc exchange at
   a time, as Envoy plays it, the picker pinned to one CPU): the route p50 (body sent →
   routing answer) with the same variants (but 100 %), in alternating rounds.

Spans go over OTLP/gRPC to a receiver in a child process (tests/otlp_receiver.py, built
from opentelemetry-proto), exported as in production (`BatchSpanProcessor`); the figures
include the exporter thread's share of the gateway's CPU.

Run: `.venv/bin/python bench/tracing_overhead.py [--requests 1500] [--rate 150]
[--picker-rounds 2] [--baseline-src DIR] [--json]`. Benchmarks, not tests: compare the
differences within one run, never absolute figures across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import gateway_overhead as overhead  # noqa: E402
import picker_throughput as picker  # noqa: E402

TRACED = "tracing: {{enabled: true, samplingRatio: {ratio}}}\n"
NO_LOG = "tracing: {explain: {recent: 0}}\n"


def start_receiver() -> tuple[subprocess.Popen[bytes], int]:
    folder = overhead.folder_until_exit("igw-otlp-")
    port_file = folder / "port"
    child = subprocess.Popen([sys.executable, __file__, "--receive", str(port_file)])
    for _ in range(300):
        if port_file.exists() and port_file.read_text():
            return child, int(port_file.read_text())
        time.sleep(0.1)
    child.kill()
    raise RuntimeError("the OTLP receiver did not start")


async def receive(port_file: str) -> None:
    from otlp_receiver import OtlpReceiver

    async with OtlpReceiver() as receiver:
        Path(port_file).write_text(str(receiver.port))
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        print(f"receiver: {len(receiver.spans)} spans in {receiver.batches} batches", flush=True)


async def serve_side_by_side(
    requests: int, rate: float, baseline_src: str | None
) -> dict[str, Any]:
    pod_port = overhead.free_port()
    pod = subprocess.Popen([sys.executable, overhead.__file__, "--serve-pod", str(pod_port)])
    gateways: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    if baseline_src is not None:
        gateways["baseline"] = overhead.start_gateway(pod_port, src=baseline_src)
    gateways["off_no_log"] = overhead.start_gateway(pod_port, config=NO_LOG)
    gateways["off"] = overhead.start_gateway(pod_port)
    gateways["on_10pct"] = overhead.start_gateway(pod_port, config=TRACED.format(ratio=0.1))
    gateways["on_100pct"] = overhead.start_gateway(pod_port, config=TRACED.format(ratio=1.0))
    times: dict[str, list[float]] = {"direct": [], **{name: [] for name in gateways}}
    paths = [("direct", pod_port)] + [(name, port) for name, (_, port) in gateways.items()]
    load_before = os.getloadavg()[0]
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            await overhead.wait_ready(session, f"http://127.0.0.1:{pod_port}/metrics")
            for _, port in paths[1:]:
                await overhead.wait_ready(session, f"http://127.0.0.1:{port}/health")

            async def call(port: int, out: list[float]) -> None:
                start = time.perf_counter()
                async with session.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    data=overhead.BODY,
                    headers={"content-type": "application/json"},
                ) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status} from port {port}")
                out.append(time.perf_counter() - start)

            for _ in range(100):  # warm connections, the picker, the exporters
                for _, port in paths:
                    await call(port, [])
            tasks = []
            start = time.perf_counter()
            for i in range(requests):
                await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
                turn = i % len(paths)  # each path goes first as often as the others
                for name, port in paths[turn:] + paths[:turn]:
                    tasks.append(asyncio.create_task(call(port, times[name])))
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=600)
    finally:
        for process, _ in gateways.values():
            process.terminate()
            process.wait(timeout=20)
        pod.terminate()
        pod.wait(timeout=10)
    direct = np.asarray(times["direct"]) * 1000
    out: dict[str, Any] = {
        "requests_each": requests,
        "rate_rps": rate,
        "load_1min": [load_before, os.getloadavg()[0]],
    }
    for name in gateways:
        ms = np.asarray(times[name]) * 1000
        out[name] = {
            "added_p50_ms": round(float(np.percentile(ms, 50) - np.percentile(direct, 50)), 4),
            "added_p99_ms": round(float(np.percentile(ms, 99) - np.percentile(direct, 99)), 4),
        }
    out["on_10pct_minus_off_p50_ms"] = round(
        out["on_10pct"]["added_p50_ms"] - out["off"]["added_p50_ms"], 4
    )
    out["log_p50_ms"] = round(out["off"]["added_p50_ms"] - out["off_no_log"]["added_p50_ms"], 4)
    if "baseline" in out:
        out["off_no_log_minus_baseline_p50_ms"] = round(
            out["off_no_log"]["added_p50_ms"] - out["baseline"]["added_p50_ms"], 4
        )
    return out


def picker_side_by_side(rounds: int, sequential: int, baseline_src: str | None) -> dict[str, Any]:
    args = argparse.Namespace(
        pods=8,
        body_bytes=8192,
        concurrency=16,
        channels=2,
        seconds=2.0,
        sequential=sequential,
        max_exchanges=20_000,
        cpu=0,
        transport="http2",
    )
    variants: list[tuple[str, str | None, float | None, int | None]] = [
        ("off_no_log", None, None, 0),
        ("off", None, None, None),
        ("on_10pct", None, 0.1, None),
    ]
    if baseline_src is not None:
        variants.insert(0, ("baseline", baseline_src, None, None))
    route: dict[str, list[float]] = {name: [] for name, *_ in variants}
    for turn in range(max(1, rounds)):
        order = variants if turn % 2 == 0 else variants[::-1]
        for name, src, tracing, recent in order:
            figures = picker.run_server(
                args, echo=False, transport="http2", src=src, tracing=tracing, recent=recent
            )
            route[name].append(figures["sequential"]["route_p50_ms"])
    out: dict[str, Any] = {
        name: {"route_p50_ms": values, "median": round(float(np.median(values)), 4)}
        for name, values in route.items()
    }
    out["on_10pct_minus_off_p50_ms"] = round(out["on_10pct"]["median"] - out["off"]["median"], 4)
    out["log_p50_ms"] = round(out["off"]["median"] - out["off_no_log"]["median"], 4)
    if "baseline" in out:
        out["off_no_log_minus_baseline_p50_ms"] = round(
            out["off_no_log"]["median"] - out["baseline"]["median"], 4
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500, help="requests per path")
    parser.add_argument("--rate", type=float, default=150.0, help="requests/s per path")
    parser.add_argument("--picker-rounds", type=int, default=2)
    parser.add_argument("--picker-sequential", type=int, default=1000)
    parser.add_argument("--baseline-src", help="a source tree from before tracing, side by side")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--receive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receive:
        asyncio.run(receive(args.receive))
        return 0
    receiver, port = start_receiver()
    os.environ.update(  # the gateways' and pickers' exporter (their children inherit it)
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
        }
    )
    try:
        result = {
            "serve": asyncio.run(serve_side_by_side(args.requests, args.rate, args.baseline_src)),
            "picker": picker_side_by_side(
                args.picker_rounds, args.picker_sequential, args.baseline_src
            ),
            "host": {"cpus": os.cpu_count()},
        }
    finally:
        receiver.send_signal(signal.SIGTERM)
        receiver.wait(timeout=20)
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    serve, pick = result["serve"], result["picker"]
    print(f"igw serve, open loop {serve['rate_rps']:g}/s, {serve['requests_each']} each")
    for name in ("baseline", "off_no_log", "off", "on_10pct", "on_100pct"):
        if name in serve:
            row = serve[name]
            print(
                f"  {name:11} added p50 {row['added_p50_ms']:.3f} ms, p99 {row['added_p99_ms']:.3f}"
            )
    print("igw picker, sequential exchanges, route p50 (ms) per round")
    for name in ("baseline", "off_no_log", "off", "on_10pct"):
        if name in pick:
            print(f"  {name:11} {pick[name]['route_p50_ms']}  median {pick[name]['median']}")
    for label, key in (
        ("off (no log) - baseline", "off_no_log_minus_baseline_p50_ms"),
        ("decision log (off - off no log)", "log_p50_ms"),
        ("on 10% - off", "on_10pct_minus_off_p50_ms"),
    ):
        if key in serve:
            print(f"p50 {label}: serve {serve[key]:+.3f} ms, picker {pick[key]:+.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
