"""Scale: what one picker replica costs as the fleet grows (a benchmark, not a test).

A synthetic fleet of N pods (32, 128, 512, 1,024 by default) serves real-size vLLM
`/metrics` pages (vLLM V1's families with their histograms, ~48 KB, `scrape_cost.
vllm_page`) that change on every scrape, from ONE process: a raw asyncio protocol on N
loopback ports, each port one pod of pool `pool-<i % P>` serving model `model-<pool>`.
Its CPU is measured beside the picker's (`fleet_cores`, and µs per page it served), which
is how to check the fleet costs little next to the figures it drives.

The picker is the real one (`build_picker`: endpoint store, HTTP scrape client, KV-event
subscriber, director and scheduler) in its own process, with P pools and P models in one
config. Decisions go through the ext_proc exchange the gRPC server feeds (the protobuf
messages Envoy sends, in process: the Envoy path is measured by `envoy_path.py`), at a
fixed rate spread over the models; each request is answered at once so nothing piles up.
Per point it reports:

* `picker_cores`: the picker process's CPU over the window / wall time (scraping,
  decisions, the event loop; the request driver's own protobuf building is in it too);
* `rss_mib`: the picker's resident memory at the end of the window;
* `view_age_p50_ms` / `view_age_max_ms`: every 20 ms, the oldest view of a routable pod
  (`EndpointStore.max_view_age_s`, the `igw_scrape_view_age_max_seconds` gauge); the
  issue's must-hold is max <= 100 ms;
* `decision_p50_ms` / `decision_p99_ms`: wall time of the request-body step (admission,
  scheduling, the reply message), the step a client waits on;
* `interval_ms`: the scrape interval the store settled on under its CPU budget
  (`--scrape-cores`, default the shipped quarter of a core).

KV events are subscribed (one SUB socket a pod, as in production) but the synthetic pods
publish none. Points last seconds: the machine is shared, the figures indicative.

Run: `.venv/bin/python bench/scale.py [--json] [--seconds S] [--pods 32,128,512,1024]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "gateway_src"))

from scrape_cost import vllm_page  # noqa: E402

DEFAULT_POINTS = "32/1/100,128/1/100,512/1/100,1024/1/100,1024/10/500,1024/100/500"
SAMPLE_S = 0.02  # how often the view age is sampled


# ---------------------------------------------------------------- the fleet process


def _serve_fleet(ports_path: str, count: int, pools: int) -> None:
    """Child: `count` pods on loopback, pod i of pool i % pools; writes the ports."""
    import uvloop

    head, _, tail = vllm_page().partition("process_cpu_seconds_total ")
    tail = tail.partition("\n")[2]
    served = [0]

    class Pod(asyncio.Protocol):
        def __init__(self, model: bytes) -> None:
            self.model = model
            self.buffer = b""

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
                request, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
                if b" /v1/models " in request.split(b"\r\n", 1)[0]:
                    body = self.model
                else:  # a counter moves on every page: no "unchanged page" shortcut
                    served[0] += 1
                    body = f"{head}process_cpu_seconds_total {served[0]}\n{tail}".encode()
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ports = []
        for i in range(count):
            listing = {"object": "list", "data": [{"id": f"model-{i % pools}"}]}
            model = json.dumps(listing).encode()
            server = await loop.create_server(lambda m=model: Pod(m), "127.0.0.1", 0)
            ports.append(server.sockets[0].getsockname()[1])
        Path(ports_path).write_text(json.dumps(ports))
        await asyncio.Event().wait()

    uvloop.run(main())


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Fleet:
    def __init__(self, count: int, pools: int) -> None:
        self.count, self.pools = count, pools

    def __enter__(self) -> Fleet:
        fd, self.path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        os.unlink(self.path)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--fleet-child", self.path,
             "--count", str(self.count), "--pools", str(self.pools)]
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
                self.ports: list[int] = json.loads(Path(self.path).read_text())
                return self
            time.sleep(0.05)
        raise RuntimeError("the fleet process did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.unlink(self.path)


# ---------------------------------------------------------------- the picker process


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _run_picker(point: dict[str, Any]) -> dict[str, Any]:
    """Child: the picker over the fleet, driven at `rate` decisions a second."""
    import orjson
    import uvloop
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

    from inference_gateway.assembly.picker import build_picker
    from inference_gateway.config.spec import GatewayConfigSpec
    from inference_gateway.core.scheduling.types import Endpoint
    from inference_gateway.frontends.extproc.picker import Exchange, PickerOptions
    from inference_gateway.frontends.extproc.wire import header_map

    ports, pools, rate = point["ports"], point["pools"], point["rate"]
    endpoints = [
        Endpoint(name=f"pod-{i}", address="127.0.0.1", port=p, pool=f"pool-{i % pools}")
        for i, p in enumerate(ports)
    ]
    config = GatewayConfigSpec.model_validate(
        {
            "pools": [{"name": f"pool-{p}"} for p in range(pools)],
            "models": [{"name": f"model-{p}", "pool": f"pool-{p}"} for p in range(pools)],
        }
    )

    def message(**kind: Any) -> pb.ProcessingRequest:
        return pb.ProcessingRequest(**kind)

    heads = message(
        request_headers=pb.HttpHeaders(
            headers=header_map({":path": "/v1/completions", ":method": "POST"})
        )
    )
    bodies = [
        message(
            request_body=pb.HttpBody(
                body=orjson.dumps({"model": f"model-{p}", "prompt": "hi " * 200, "max_tokens": 5}),
                end_of_stream=True,
            )
        )
        for p in range(pools)
    ]
    answer_heads = message(
        response_headers=pb.HttpHeaders(
            headers=header_map({":status": "200", "content-type": "application/json"})
        )
    )
    answer = message(
        response_body=pb.HttpBody(body=b'{"usage": {"completion_tokens": 5}}', end_of_stream=True)
    )

    async def main() -> dict[str, Any]:
        picker = build_picker(endpoints, config, host="127.0.0.1", grpc_port=0, metrics_port=None)
        store = picker.store
        if point["scrape_cores"] is not None:
            store.max_cpu_fraction = point["scrape_cores"]
        await picker.start()
        loop = asyncio.get_running_loop()
        await asyncio.sleep(1.5)  # connections warm, the interval adapted
        ages: list[float] = []
        decisions: list[float] = []
        failed = 0

        async def sample() -> None:
            while True:
                ages.append(store.max_view_age_s())
                await asyncio.sleep(SAMPLE_S)

        async def decide(n: int) -> None:
            nonlocal failed
            exchange = Exchange(picker.director, PickerOptions(), loop.time)
            await exchange.handle(heads)
            started = time.perf_counter()
            await exchange.handle(bodies[n % pools])
            decisions.append(time.perf_counter() - started)
            if exchange.life is None:
                failed += 1
                return
            await exchange.handle(answer_heads)
            await exchange.handle(answer)

        sampler = loop.create_task(sample())
        cpu0, wall0 = time.process_time(), time.monotonic()
        scrapes0 = store.scrapes
        tasks, n, gap = [], 0, 1.0 / rate if rate else 0.0
        while (now := time.monotonic()) - wall0 < point["seconds"]:
            if rate:
                while n < (now - wall0) * rate:
                    tasks.append(loop.create_task(decide(n)))
                    n += 1
                await asyncio.sleep(gap)
            else:
                await asyncio.sleep(0.05)
        await asyncio.gather(*tasks)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        sampler.cancel()
        rounds = store.scrapes - scrapes0
        figures = {
            "picker_cores": round(cpu / wall, 3),
            "rss_mib": round(_rss_mib(), 1),
            "view_age_p50_ms": round(_quantile(ages, 0.5) * 1000, 1),
            "view_age_max_ms": round(max(ages, default=0.0) * 1000, 1),
            "decision_p50_ms": round(_quantile(decisions, 0.5) * 1000, 3),
            "decision_p99_ms": round(_quantile(decisions, 0.99) * 1000, 3),
            "decisions": len(decisions),
            "failed_decisions": failed,
            "rounds_per_s": round(rounds / wall, 2),
            "interval_ms": round(store.current_interval_s * 1000, 1),
            "ready_pods": len(store.ready()),
        }
        await picker.stop(grace_s=0)
        return figures

    return uvloop.run(main())


def run_point(pods: int, pools: int, rate: float, seconds: float, cores: float | None) -> Any:
    with Fleet(pods, pools) as fleet:
        point = {"ports": fleet.ports, "pools": pools, "rate": rate, "seconds": seconds,
                 "scrape_cores": cores}  # fmt: skip
        fleet_cpu0, wall0 = _cpu_s(fleet.proc.pid), time.monotonic()
        child = subprocess.run(
            [sys.executable, __file__, "--picker-child"],
            input=json.dumps(point),
            capture_output=True,
            text=True,
            timeout=seconds + 120,
            check=False,
        )
        fleet_cpu, wall = _cpu_s(fleet.proc.pid) - fleet_cpu0, time.monotonic() - wall0
    if child.returncode != 0:
        raise RuntimeError(f"picker child failed: {child.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    scrapes = figures["rounds_per_s"] * pods * seconds
    figures["fleet_cores"] = round(fleet_cpu / wall, 3)  # over the child's whole life
    figures["fleet_us_per_page"] = round(fleet_cpu / max(scrapes, 1) * 1e6, 1)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=4.0, help="window per point")
    parser.add_argument(
        "--points", default=DEFAULT_POINTS, help="pods/pools/req-per-s, comma-separated"
    )
    parser.add_argument(
        "--scrape-cores", type=float, default=None,
        help="the store's scrape CPU budget in cores (default: the shipped 0.25)",
    )  # fmt: skip
    parser.add_argument("--fleet-child", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pools", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--picker-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fleet_child:
        _serve_fleet(args.fleet_child, args.count, args.pools)
        return 0
    if args.picker_child:
        print(json.dumps(_run_picker(json.loads(sys.stdin.read()))))
        return 0
    try:
        points = [tuple(int(x) for x in p.split("/")) for p in args.points.split(",") if p]
        assert all(len(p) == 3 and p[0] > 0 and p[1] > 0 for p in points)
    except (ValueError, AssertionError):
        print("--points takes pods/pools/rate triples, e.g. 128/10/500", file=sys.stderr)
        return 2
    result: dict[str, Any] = {"scrape_cores": args.scrape_cores, "points": {}}
    for pods, pools, rate in points:
        print(f"scale: {pods} pods, {pools} pools, {rate} req/s …", file=sys.stderr, flush=True)
        key = f"{pods}/{pools}/{rate}"
        result["points"][key] = run_point(pods, pools, rate, args.seconds, args.scrape_cores)
    result["load_1min"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(result))
        return 0
    print("pods/pools/rps  picker cores  RSS MiB  view age p50/max ms  decision p50/p99 ms"
          "  interval ms  fleet cores (µs/page)")  # fmt: skip
    for key, r in result["points"].items():
        print(
            f"{key:15s} {r['picker_cores']:12.2f} {r['rss_mib']:8.0f} "
            f"{r['view_age_p50_ms']:9.0f} / {r['view_age_max_ms']:<8.0f} "
            f"{r['decision_p50_ms']:8.2f} / {r['decision_p99_ms']:<8.2f} "
            f"{r['interval_ms']:11.0f}  {r['fleet_cores']:.2f} ({r['fleet_us_per_page']:.0f})"
        )
    print(f"1-min load average at the end: {result['load_1min']} (a shared 2-core machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
