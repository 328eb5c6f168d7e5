"""Benchmark: ext_proc exchanges per second of `igw picker` on one core, and its added latency.

Starts the picker in a child process pinned to one CPU (so its capacity is one core's,
and its CPU time is measured apart from this client's), in front of 8 in-memory pods
(the store's fetch seam answers their metrics; no model server runs), then plays Envoy's
side of whole exchanges over loopback gRPC: request headers, an 8 KB JSON body,
the picker's routing answer (headers + streamed body), then response headers and a
JSON response body with `usage`, as Envoy sends them in FULL_DUPLEX_STREAMED mode.

The picker runs on `--transport` (default `http2`, its own HTTP/2 gRPC server; `grpcio`
for grpc.aio). The same drive is played against "echo" ext_proc servers that answer with
fixed messages and pick nothing, one per gRPC server (`--floors`): the floor any Python
ext_proc on that stack pays per exchange, so the picker's figure reads apart from the
machine.

Two phases:

* sequential — one exchange at a time: the latency the picker adds to a request
  (`route`: body sent → routing answer complete; `exchange`: the whole stream);
* load — `--concurrency` streams at once for `--seconds`: exchanges per second, the
  picker's CPU seconds, and so exchanges per second per busy core.

    python bench/picker_throughput.py [--pods 8] [--concurrency 64] [--seconds 8]
        [--transport http2|grpcio] [--floors http2,grpcio] [--baseline-src DIR] [--json]

`--baseline-src DIR` also runs the picker from another source tree's `gateway_src` (an
export of main, say), alternating with this tree's over `--rounds`, so a change is
measured before and after side by side on the same machine in the same minutes.

A benchmark, not a test: figures depend on the machine; the client shares it, so on a
small machine the client may saturate before the picker does (then the per-core figure,
from the picker's own CPU time, is the one to read).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")
METRICS = (
    "vllm:num_requests_waiting 0\nvllm:num_requests_running 4\nvllm:kv_cache_usage_perc 0.3\n"
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="20000"} 1\n'
)
MODEL = "llama-3.1-8b"


# ---------------------------------------------------------------------- picker (child)


async def serve(
    port_file: Path,
    pods: int,
    transport: str = "http2",
    tracing: float | None = None,
    recent: int | None = None,
) -> None:
    from inference_gateway.assembly.picker import build_picker
    from inference_gateway.core.scheduling.types import Endpoint

    try:
        from inference_gateway.core.scheduling.config_checks import parse_config
    except ImportError:  # a --baseline-src tree from before config/ became schema only
        from inference_gateway.config.spec import parse_config  # type: ignore[attr-defined,no-redef]

    endpoints = [Endpoint(f"pod-{i}", f"10.0.0.{i + 1}", 8000, pool="p") for i in range(pods)]
    models = json.dumps({"data": [{"id": MODEL}]})

    async def fetch(endpoint: Endpoint, path: str) -> str:
        return models if path == "/v1/models" else METRICS

    # Admission stays in the path but never binds: this measures the picker's own cost,
    # not how many requests the flow-control thresholds let through per scrape interval.
    # `tracing`: spans sampled at that ratio, exported as the OTEL_* variables say
    # (bench/tracing_overhead.py)
    # and `recent`: decisions kept for `igw explain` (None: the default)
    traced: dict[str, Any] = {}
    if tracing is not None:
        traced["enabled"], traced["samplingRatio"] = True, tracing
    if recent is not None:
        traced["explain"] = {"recent": recent}
    config = parse_config(
        {
            "flowControl": {
                "saturation": {"queueThreshold": 1e6, "noncriticalQueueThreshold": 1e6}
            },
            **({"tracing": traced} if traced else {}),  # an older tree has no such key
        }
    )
    picker = build_picker(
        endpoints,
        config,
        fetch=fetch,
        host="127.0.0.1",
        grpc_port=0,
        metrics_port=None,
        transport=transport,
    )
    await picker.start()
    port_file.write_text(str(picker.port))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await picker.stop(grace_s=0)


def echo_answers(request: Any) -> list[Any]:
    """Fixed answers in the picker's shapes (headers + streamed body), no picking."""
    from inference_gateway.frontends.extproc.wire import body_chunks, headers_response

    kind = request.WhichOneof("request")
    if kind == "request_body" and request.request_body.end_of_stream:
        return [
            headers_response(clear_route_cache=True, destination="10.0.0.1:8000"),
            *body_chunks(request.request_body.body),
        ]
    if kind == "response_headers":
        return [headers_response(request=False)]
    if kind == "response_body":
        return list(body_chunks(request.response_body.body, request=False))
    return []


async def serve_echo(port_file: Path, transport: str) -> None:
    """An echo ext_proc on one of the picker's gRPC servers: the floor a Python ext_proc
    server pays per exchange on that stack before any picking. Each reads and writes the
    way the picker does on it (`context.read`/`write`; raw bytes in place)."""
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    from inference_gateway.assembly.picker import PROCESS_PATH
    from inference_gateway.transport.http2_server import Call, Http2GrpcServer

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if transport == "http2":

        async def process(call: Call) -> None:
            while (raw := await call.read()) is not None:
                answers = echo_answers(pb.ProcessingRequest.FromString(raw))
                if answers:
                    call.send([a.SerializeToString() for a in answers])

        http2 = Http2GrpcServer({PROCESS_PATH: process})
        port_file.write_text(str(await http2.start("127.0.0.1", 0)))
        await stop.wait()
        await http2.stop(0)
        return

    class Echo(pb_grpc.ExternalProcessorServicer):
        async def Process(self, requests: Any, context: Any) -> None:  # gRPC's name
            while (request := await context.read()) is not grpc.aio.EOF:
                for answer in echo_answers(request):
                    await context.write(answer)

    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_file.write_text(str(port))
    await stop.wait()
    await server.stop(0)


def serve_main(
    port_file: str,
    pods: int,
    cpu: int,
    transport: str,
    echo: bool = False,
    tracing: float | None = None,
    recent: int | None = None,
) -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {cpu})
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    path = Path(port_file)
    asyncio.run(
        serve_echo(path, transport) if echo else serve(path, pods, transport, tracing, recent)
    )


# ---------------------------------------------------------------------- Envoy (client)


def messages(body_bytes: int) -> dict[str, Any]:
    from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

    from inference_gateway.frontends.extproc.wire import header_map

    # Distinct prompts behind one shared 2 KB system prompt, as chat traffic looks: the
    # prefix index sees shared leading blocks, not one prompt repeated forever.
    rng = random.Random(7)
    system = "You are a helpful assistant for the platform team. " * 40
    bodies = []
    for _ in range(512):
        user = "".join(rng.choice("abcdefghij klmnop") for _ in range(max(0, body_bytes - 2200)))
        bodies.append(
            json.dumps(
                {
                    "model": MODEL,
                    "messages": [
                        {"role": "system", "content": system[:2000]},
                        {"role": "user", "content": user},
                    ],
                    "max_tokens": 16,
                }
            ).encode()
        )
    full_duplex = ProcessingMode.FULL_DUPLEX_STREAMED
    reply = json.dumps(
        {
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 2000, "completion_tokens": 16, "total_tokens": 2016},
        }
    ).encode()
    return {
        "body": bodies[0],
        "request_bodies": [
            pb.ProcessingRequest(request_body=pb.HttpBody(body=b, end_of_stream=True))
            for b in bodies
        ],
        "headers": pb.ProcessingRequest(
            request_headers=pb.HttpHeaders(
                headers=header_map(
                    {
                        ":method": "POST",
                        ":path": "/v1/chat/completions",
                        "content-type": "application/json",
                    }
                )
            ),
            protocol_config=pb.ProtocolConfiguration(
                request_body_mode=full_duplex, response_body_mode=full_duplex
            ),
        ),
        "response_headers": pb.ProcessingRequest(
            response_headers=pb.HttpHeaders(
                headers=header_map({":status": "200", "content-type": "application/json"})
            )
        ),
        "response_body": pb.ProcessingRequest(
            response_body=pb.HttpBody(body=reply, end_of_stream=True)
        ),
    }


async def exchange(stub: Any, m: dict[str, Any], n: int) -> tuple[float, float]:
    """One whole exchange with the n-th body; (route seconds, exchange seconds)."""
    started = time.perf_counter()
    call = stub.Process()
    await call.write(m["headers"])
    await call.write(m["request_bodies"][n % len(m["request_bodies"])])
    while True:
        answer = await call.read()
        if answer.HasField("immediate_response"):
            raise RuntimeError(f"picker refused: {answer.immediate_response.body!r}")
        body = answer.request_body.response.body_mutation.streamed_response
        if answer.HasField("request_body") and body.end_of_stream:
            break
    routed = time.perf_counter()
    await call.write(m["response_headers"])
    await call.read()
    await call.write(m["response_body"])
    await call.read()
    await call.done_writing()
    return routed - started, time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def drive(port: int, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    m = messages(args.body_bytes)
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(args.channels)]
    stubs = [pb_grpc.ExternalProcessorStub(c) for c in channels]
    try:
        for n in range(200):  # warm-up: connections, caches, the prefix index
            await exchange(stubs[0], m, n)
        sequential = [await exchange(stubs[0], m, n) for n in range(args.sequential)]
        route = [r for r, _ in sequential]
        whole = [w for _, w in sequential]

        results: list[tuple[float, float]] = []
        deadline = time.perf_counter() + args.seconds
        budget = [args.max_exchanges]

        async def worker(i: int) -> None:
            stub = stubs[i % len(stubs)]
            while time.perf_counter() < deadline and budget[0] > 0:
                budget[0] -= 1
                results.append(await exchange(stub, m, budget[0]))

        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(args.concurrency)))
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    finally:
        for c in channels:
            await c.close()
    load_route = [r for r, _ in results]
    load_whole = [w for _, w in results]
    return {
        "body_bytes": len(m["body"]),
        "pods": args.pods,
        "sequential": {
            "exchanges": len(sequential),
            "route_p50_ms": round(pct(route, 0.5), 3),
            "route_p99_ms": round(pct(route, 0.99), 3),
            "exchange_p50_ms": round(pct(whole, 0.5), 3),
            "exchange_p99_ms": round(pct(whole, 0.99), 3),
            "route_mean_ms": round(statistics.fmean(route) * 1000, 3),
        },
        "load": {
            "concurrency": args.concurrency,
            "exchanges": len(results),
            "seconds": round(elapsed, 3),
            "exchanges_per_s": round(len(results) / elapsed, 1),
            "picker_cpu_s": round(cpu, 3),
            "picker_core_busy": round(cpu / elapsed, 3),
            "exchanges_per_picker_core_s": round(len(results) / cpu, 1) if cpu else None,
            "route_p50_ms": round(pct(load_route, 0.5), 3),
            "route_p99_ms": round(pct(load_route, 0.99), 3),
            "exchange_p99_ms": round(pct(load_whole, 0.99), 3),
        },
        "host": {"cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]},
    }


def run_server(
    args: argparse.Namespace,
    *,
    echo: bool,
    transport: str,
    src: str | None = None,
    tracing: float | None = None,
    recent: int | None = None,
) -> dict[str, Any]:
    """Start the picker (or an echo floor) pinned to one CPU, drive it, stop it; `src`:
    a source tree whose `gateway_src` the picker runs instead of this one; `tracing`: its
    sampling ratio with tracing on."""
    env = dict(os.environ)
    if src:
        source = str(Path(src).resolve() / "gateway_src")
        env["PYTHONPATH"] = os.pathsep.join([source, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        command = [sys.executable, __file__, "--serve", str(port_file)]
        command += ["--pods", str(args.pods), "--cpu", str(args.cpu), "--transport", transport]
        if tracing is not None:
            command += ["--tracing", str(tracing)]
        if recent is not None:
            command += ["--recent", str(recent)]
        child = subprocess.Popen([*command, *(["--echo"] if echo else [])], env=env)
        try:
            for _ in range(300):  # up to 30 s for imports and the first scrape
                if port_file.exists() and port_file.read_text():
                    break
                if child.poll() is not None:
                    raise SystemExit("picker process exited early")
                time.sleep(0.1)
            return asyncio.run(drive(int(port_file.read_text()), args, child.pid))
        finally:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Baseline and this tree alternately, `args.rounds` times each."""
    rounds: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
    for _ in range(max(1, args.rounds)):
        for name, src in (("baseline", args.baseline_src), ("this", None)):
            rounds[name].append(run_server(args, echo=False, transport=args.transport, src=src))
    summary = {}
    for name, runs in rounds.items():
        per_core = [r["load"]["exchanges_per_picker_core_s"] or 0 for r in runs]
        summary[name] = {
            "exchanges_per_picker_core_s": per_core,
            "mean": round(statistics.fmean(per_core), 1),
            "route_p50_ms": [r["sequential"]["route_p50_ms"] for r in runs],
        }
    base = summary["baseline"]["mean"]
    return {
        "baseline_src": args.baseline_src,
        **summary,
        "this_vs_baseline": round(summary["this"]["mean"] / base, 3) if base else None,
        "host": {"cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]},
    }


def format_comparison(c: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"exchanges per picker CPU-second, alternating runs (baseline: {c['baseline_src']})",
            f"  baseline  {c['baseline']['exchanges_per_picker_core_s']}  "
            f"mean {c['baseline']['mean']}  route p50 ms {c['baseline']['route_p50_ms']}",
            f"  this tree {c['this']['exchanges_per_picker_core_s']}  "
            f"mean {c['this']['mean']}  route p50 ms {c['this']['route_p50_ms']}",
            f"  this / baseline: {c['this_vs_baseline']}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--body-bytes", type=int, default=8192)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--sequential", type=int, default=1000)
    parser.add_argument("--max-exchanges", type=int, default=200_000)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, default=0, help="CPU the picker is pinned to")
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tracing", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--recent", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--transport", choices=["http2", "grpcio"], default="http2")
    parser.add_argument(
        "--floors",
        default="http2,grpcio",
        help="echo floors to measure, comma-separated (http2, grpcio); empty: none",
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the floor runs")
    parser.add_argument("--baseline-src", help="source tree to compare with, side by side")
    parser.add_argument("--rounds", type=int, default=2, help="alternations with the baseline")
    args = parser.parse_args(argv)
    if args.serve:
        serve_main(
            args.serve, args.pods, args.cpu, args.transport, args.echo, args.tracing, args.recent
        )
        return 0
    floors = [] if args.no_floor else [f for f in args.floors.split(",") if f]
    if any(f not in ("http2", "grpcio") for f in floors):
        parser.error(f"--floors: http2 and/or grpcio, not {args.floors!r}")

    with contextlib.suppress(AttributeError, OSError):  # the client stays off the picker's CPU
        others = set(range(os.cpu_count() or 1)) - {args.cpu}
        if others:
            os.sched_setaffinity(0, others)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.baseline_src:
        print(json.dumps(compare(args)) if args.json else format_comparison(compare(args)))
        return 0
    figures = run_server(args, echo=False, transport=args.transport)
    figures["transport"] = args.transport
    for transport in floors:
        floor = run_server(args, echo=True, transport=transport)
        key = "grpc_floor" if transport == "grpcio" else f"{transport}_floor"
        figures[key] = {"sequential": floor["sequential"], "load": floor["load"]}
        if transport == args.transport:
            ratio = figures["load"]["exchanges_per_picker_core_s"] or 0
            base = floor["load"]["exchanges_per_picker_core_s"] or 0
            figures["picker_vs_floor_per_core"] = round(ratio / base, 3) if base else None
    if args.json:
        print(json.dumps(figures))
    else:
        s, load = figures["sequential"], figures["load"]
        print(
            f"picker ({args.transport}), {figures['pods']} pods, "
            f"{figures['body_bytes']} B bodies, loopback gRPC"
        )
        print(
            f"  sequential ({s['exchanges']}): route p50 {s['route_p50_ms']} ms, "
            f"p99 {s['route_p99_ms']} ms; whole exchange p50 {s['exchange_p50_ms']} ms, "
            f"p99 {s['exchange_p99_ms']} ms"
        )
        print(
            f"  load (concurrency {load['concurrency']}): {load['exchanges_per_s']} exchanges/s, "
            f"picker core busy {load['picker_core_busy']:.0%}, "
            f"{load['exchanges_per_picker_core_s']} exchanges per picker CPU-second; "
            f"route p99 {load['route_p99_ms']} ms"
        )
        for transport in floors:
            key = "grpc_floor" if transport == "grpcio" else f"{transport}_floor"
            f_seq, f_load = figures[key]["sequential"], figures[key]["load"]
            print(
                f"  {transport} echo floor (fixed answers): route p99 {f_seq['route_p99_ms']} ms, "
                f"exchange p99 {f_seq['exchange_p99_ms']} ms, "
                f"{f_load['exchanges_per_picker_core_s']} exchanges per CPU-second"
            )
        if "picker_vs_floor_per_core" in figures:
            print(f"  picker/floor per core: {figures['picker_vs_floor_per_core']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
