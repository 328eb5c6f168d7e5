"""The in-cluster data path through real Envoy 1.40, side by side (a benchmark, not a test).

1. Overhead (`overhead`): one zero-delay model server (bench/gateway_overhead.py's: answers
   at once, vLLM metric names, no engine), called open loop at `--rate` requests/s on each
   of five paths at once, every tick one request per path, the order rotating, so all see
   the same machine:

   * `direct` — the pod;
   * `envoy_rr` — Envoy routing round robin to the pod (a Service backend, no ext_proc);
   * `envoy_picker` — Envoy → `igw picker` ext_proc (TLS, HTTP/2) → ORIGINAL_DST;
   * `envoy_bbr_picker` — Envoy → `igw bbr` → `igw picker` → ORIGINAL_DST, the cluster's
     path (the bootstrap `inference_gateway.envoyproxy` renders for the GitOps tree);
   * `serve` — `igw serve`, the standalone proxy.

   Each process is its own (Envoys with one worker each). Reported per repeat: p50/p99 of
   each path, what each Envoy path adds over `envoy_rr` at p50, and the picker's and the
   body-based router's CPU per request (`/proc/PID/stat` over the timed phase, divided by
   the requests each handled; the picker's includes its background scrapes of one pod).
   The machine is shared: the repeats give ranges, the load average is recorded.
2. Verdict (`ttft`): the demo's mixed fleet (4 H100 + 4 A10G emulated pods) and bursty
   trace through Envoy + picker and through Envoy round robin, each on a fresh fleet
   (demo/envoy.py), P99 TTFT of each and their ratio (the simulator's verdict must hold
   through the real proxy).

Run: `.venv/bin/python bench/envoy_path.py [--json] [--rate R] [--requests N] [--repeats K]`.
The processes are started with the real-Envoy test harness (tests/e2e/envoy/envoy_harness.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e" / "envoy"))

from envoy_harness import IgwProcess, free_port  # noqa: E402
from gateway_overhead import (  # noqa: E402
    BODY,
    MODEL,
    process_cpu_s,
    scratch_folder,
    start_gateway,
    wait_ready,
)

from inference_gateway.envoyproxy.bootstrap import render_round_robin  # noqa: E402
from inference_gateway.envoyproxy.process import EnvoyProcess  # noqa: E402
from inference_gateway.envoyproxy.settings import (  # noqa: E402
    Address,
    GatewaySettings,
    PoolRoute,
)

PATHS = ("direct", "envoy_rr", "envoy_picker", "envoy_bbr_picker", "serve")
CONFIG = f"pools: [{{name: p, selector: {{app: vllm}}}}]\nmodels: [{{name: {MODEL}, pool: p}}]\n"


def settings(picker: int, bbr: int | None, log: str | None = None) -> GatewaySettings:
    route = PoolRoute(
        route="p-route", pool="p", picker=Address("127.0.0.1", picker), models=(MODEL,)
    )
    default = PoolRoute(route="igw-default-route", pool="p", picker=Address("127.0.0.1", picker))
    return GatewaySettings(
        routes=(route, default),
        bbr=Address("127.0.0.1", bbr) if bbr else None,
        listener_address="127.0.0.1",
        listener_port=0,
        access_log=log,
    )


async def overhead(rate: float, requests: int, repeats: int) -> dict[str, Any]:
    with scratch_folder("igw-envoy-bench-") as folder:
        return await _overhead(folder, rate, requests, repeats)


async def _overhead(folder: Path, rate: float, requests: int, repeats: int) -> dict[str, Any]:
    pod_port = free_port()
    pod = subprocess.Popen(
        [sys.executable, str(HERE / "gateway_overhead.py"), "--serve-pod", str(pod_port)]
    )
    (folder / "endpoints.yaml").write_text(
        f"endpoints: [{{name: pod-0, address: 127.0.0.1, port: {pod_port}, "
        "labels: {igw.dev/pool: p, app: vllm}}]\n"
    )
    (folder / "config.yaml").write_text(CONFIG)
    files = ["--endpoints", str(folder / "endpoints.yaml"), "--config", str(folder / "config.yaml")]
    picker = IgwProcess("picker", [*files, "--metrics-port", "0", "--tls"])
    bbr = IgwProcess("bbr", ["--config", str(folder / "config.yaml")])
    serve, serve_port = start_gateway(pod_port)
    envoys: list[EnvoyProcess] = []
    runs: list[dict[str, Any]] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            await wait_ready(session, f"http://127.0.0.1:{pod_port}/metrics")
            await picker.start()
            await bbr.start()
            with_picker = settings(picker.port, None, str(folder / "picker.log"))
            pods = [Address("127.0.0.1", pod_port)]
            rr = EnvoyProcess(with_picker, bootstrap=render_round_robin(with_picker, pods))
            envoys = [
                rr,
                EnvoyProcess(with_picker),
                EnvoyProcess(settings(picker.port, bbr.port, str(folder / "bbr.log"))),
            ]
            for envoy in envoys:
                await envoy.start()
            await wait_ready(session, f"http://127.0.0.1:{serve_port}/health")
            urls = {
                "direct": f"http://127.0.0.1:{pod_port}",
                "envoy_rr": envoys[0].url,
                "envoy_picker": envoys[1].url,
                "envoy_bbr_picker": envoys[2].url,
                "serve": f"http://127.0.0.1:{serve_port}",
            }

            async def call(path: str, out: list[float]) -> None:
                start = time.perf_counter()
                async with session.post(
                    urls[path] + "/v1/completions",
                    data=BODY,
                    headers={"content-type": "application/json"},
                ) as r:
                    await r.read()
                    if r.status != 200:
                        said = [line for line in picker.log + bbr.log if "WARNING" in line]
                        raise RuntimeError(f"HTTP {r.status} on {path}: {await r.text()} {said}")
                out.append(time.perf_counter() - start)

            for _ in range(100):  # warm connections, the picker and the router
                for path in PATHS:
                    await call(path, [])
            for _ in range(repeats):
                runs.append(await _one_run(call, rate, requests, picker, bbr))
    finally:
        for envoy in envoys:
            await envoy.stop()
        await bbr.stop()
        await picker.stop()
        for process in (serve, pod):
            process.terminate()
            process.wait(timeout=10)
    return {"rate_rps": rate, "requests_each": requests, "runs": runs, **_ranges(runs)}


async def _one_run(
    call: Any, rate: float, requests: int, picker: IgwProcess, bbr: IgwProcess
) -> dict[str, Any]:
    assert picker.process is not None and bbr.process is not None
    latencies: dict[str, list[float]] = {p: [] for p in PATHS}
    load_before = os.getloadavg()[0]
    cpu_before = (process_cpu_s(picker.process.pid), process_cpu_s(bbr.process.pid))
    tasks = []
    start = time.perf_counter()
    for i in range(requests):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        shift = i % len(PATHS)
        for path in PATHS[shift:] + PATHS[:shift]:
            tasks.append(asyncio.create_task(call(path, latencies[path])))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=300)
    picker_cpu = process_cpu_s(picker.process.pid) - cpu_before[0]
    bbr_cpu = process_cpu_s(bbr.process.pid) - cpu_before[1]
    row: dict[str, Any] = {"load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]}
    for path, values in latencies.items():
        ms = np.asarray(values) * 1000
        row[f"{path}_p50_ms"] = float(np.percentile(ms, 50))
        row[f"{path}_p99_ms"] = float(np.percentile(ms, 99))
    for path in ("envoy_picker", "envoy_bbr_picker"):
        row[f"{path}_added_p50_ms"] = row[f"{path}_p50_ms"] - row["envoy_rr_p50_ms"]
    row["serve_added_p50_ms"] = row["serve_p50_ms"] - row["direct_p50_ms"]
    row["picker_cpu_ms_per_request"] = picker_cpu * 1000 / (2 * requests)
    row["bbr_cpu_ms_per_request"] = bbr_cpu * 1000 / requests
    return row


def _ranges(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in runs[0] if k.endswith(("_ms", "_per_request"))]
    return {"range": {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in keys}}


async def ttft_verdict(duration: float, rate: float, seed: int) -> dict[str, Any]:
    """The demo's fleet and trace through Envoy + picker and Envoy round robin."""
    from inference_gateway.demo.envoy import envoy_policies

    return await envoy_policies(duration=duration, rate=rate, seed=seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=150.0, help="requests/s on each path")
    parser.add_argument("--requests", type=int, default=1500, help="per path and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ttft-duration", type=float, default=40.0, help="0 skips the verdict")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {
        "overhead": asyncio.run(overhead(args.rate, args.requests, args.repeats))
    }
    if args.ttft_duration > 0:
        out["ttft"] = asyncio.run(ttft_verdict(args.ttft_duration, 6.0, 7))
    if args.json:
        print(json.dumps(out))
        return 0
    print(_table(out))
    return 0


def _table(out: dict[str, Any]) -> str:
    o = out["overhead"]
    lines = [f"open loop, {o['rate_rps']:.0f} req/s on each path, {o['requests_each']} each"]
    lines.append(
        "run  " + "  ".join(f"{p:>16}" for p in PATHS) + "   +picker  +bbr+pk  pk-cpu  bbr-cpu"
    )
    for i, r in enumerate(o["runs"]):
        cells = "  ".join(f"{r[p + '_p50_ms']:16.3f}" for p in PATHS)
        lines.append(
            f"{i:>3}  {cells}  {r['envoy_picker_added_p50_ms']:8.3f} "
            f"{r['envoy_bbr_picker_added_p50_ms']:7.3f} {r['picker_cpu_ms_per_request']:7.3f} "
            f"{r['bbr_cpu_ms_per_request']:7.3f}   load {r['load_1min_before']:.1f}"
        )
    if "ttft" in out:
        t = out["ttft"]
        lines.append(
            f"P99 TTFT: envoy+picker {t['envoy_picker']['ttft_p99_s']:.3f} s, envoy round robin "
            f"{t['envoy_round_robin']['ttft_p99_s']:.3f} s, ratio {t['ratio_p99_ttft']:.3f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
