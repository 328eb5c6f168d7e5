"""Scrape cost: the CPU the endpoint store spends watching pods (a benchmark, not a test).

1. Parse: CPU per scrape of a real-size vLLM `/metrics` page (vLLM V1's metric names and
   histogram buckets, `vllm/v1/metrics/loggers.py`, plus the process, Python and
   HTTP-instrumentator families a vLLM server also exports), parsed by the gateway's
   vLLM adapter and, side by side in the same process, by the general Prometheus text
   parser the adapter used before (`prometheus_client.parser`, kept below as the baseline);
   and the pod's side: prometheus_client rendering the whole page against the families
   the picker asks vLLM for (`/metrics/?name[]=…`, `adapters.FILTERED_PATHS`).
2. Idle CPU: one process runs `igw picker` (`build_picker`, no traffic) over N pods that
   serve that page from another process, and reports the core fraction it used and the
   scrape interval the store settled on. Side by side in the same run: `current` (pods
   that filter, as vLLM does), `whole` (the same picker over pods that do not: every
   scrape reads the whole page) and `legacy` (the pre-change parts: the general parser,
   aiohttp's client, a fixed interval, whole pages). Every page differs from the last (a
   value moves on each request), so no "unchanged page" shortcut flatters the figure.

Run: `.venv/bin/python bench/scrape_cost.py [--json] [--seconds S] [--pods 4,32,128]`.
Pods, picker and this driver share the machine's cores: compare figures of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# vLLM V1 buckets (vllm/v1/metrics/loggers.py)
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
       10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TOKENS_1_2_5 = (
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1000,
    2000,
    5000,
    10000,
    20000,
    50000,
    100000,
)  # fmt: skip  (build_1_2_5_buckets(max_model_len=131072))
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
PARAMS_N = (1, 2, 5, 10, 20)
HTTP_HIGHR = (  # prometheus-fastapi-instrumentator
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5,
    4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
)  # fmt: skip


def _fmt(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


def vllm_page(*, lora: bool = False, tick: int = 0) -> str:
    """A vLLM V1 server's `/metrics` after some traffic: every family it exports by
    default, one engine, with non-zero histograms (so every line has a real number)."""
    lines: list[str] = []
    labels = f'engine="0",model_name="{MODEL}"'

    def family(name: str, kind: str, doc: str) -> None:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")

    def histogram(name: str, doc: str, bounds: tuple[float, ...], scale: float) -> None:
        family(name, "histogram", doc)
        total = 0
        for i, bound in enumerate((*bounds, float("inf"))):
            total += 7 * (i + 1)
            lines.append(f'{name}_bucket{{{labels},le="{_fmt(bound)}"}} {float(total)}')
        lines.append(f"{name}_count{{{labels}}} {float(total)}")
        lines.append(f"{name}_sum{{{labels}}} {total * scale:.6f}")
        family(f"{name}_created", "gauge", doc)
        lines.append(f"{name}_created{{{labels}}} 1.7330e+09")

    # prometheus_client writes a HELP and a TYPE line before every family, these too
    family("python_gc_objects_collected", "counter", "Objects collected during gc")
    for gen in range(3):
        lines.append(f'python_gc_objects_collected_total{{generation="{gen}"}} {1234.0 * gen}')
    family("python_info", "gauge", "Python platform information")
    lines.append('python_info{implementation="CPython",major="3",minor="12",patchlevel="8",'
                 'version="3.12.8"} 1.0')  # fmt: skip
    for name, value in (
        ("process_virtual_memory_bytes", "9.1e+10"),
        ("process_resident_memory_bytes", "3.2e+09"),
        ("process_start_time_seconds", "1.733e+09"),
        ("process_cpu_seconds_total", f"{1000 + tick * 0.01:.2f}"),
        ("process_open_fds", "84.0"),
        ("process_max_fds", "1.048576e+06"),
    ):
        kind = "counter" if name.endswith("_total") else "gauge"
        family(name.removesuffix("_total"), kind, "Process figure.")
        lines.append(f"{name} {value}")
    family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
    lines.append(f"vllm:num_requests_running{{{labels}}} 3.0")
    family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
    lines.append(f"vllm:num_requests_waiting{{{labels}}} 1.0")
    family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
    lines.append(f"vllm:kv_cache_usage_perc{{{labels}}} 0.42")
    if lora:
        family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.")
        lines.append('vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",'
                     'waiting_lora_adapters=""} 1.733e+09')  # fmt: skip
    for name, doc in (
        ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
        ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of tokens."),
        ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of tokens."),
        ("vllm:prompt_tokens", "Number of prefill tokens processed."),
        ("vllm:generation_tokens", "Number of generation tokens processed."),
    ):
        family(f"{name}_total", "counter", doc)
        lines.append(f"{name}_total{{{labels}}} 123456.0")
        lines.append(f"{name}_created{{{labels}}} 1.7330e+09")
    family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for reason in ("stop", "length", "abort"):
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} 321.0')
    histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
              TOKENS_1_2_5, 800)  # fmt: skip
    histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              TOKENS_1_2_5, 150)  # fmt: skip
    histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              ITERATION_TOKENS, 64)  # fmt: skip
    histogram("vllm:request_max_num_generation_tokens", "Max generation tokens in a sequence.",
              TOKENS_1_2_5, 150)  # fmt: skip
    histogram("vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N, 1)
    histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens parameter.",
              TOKENS_1_2_5, 512)  # fmt: skip
    histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token.", TTFT, 0.2)
    histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token.",
              ITL, 0.02)  # fmt: skip
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency.", ITL, 0.02)
    for name, doc in (
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency."),
        ("vllm:request_queue_time_seconds", "Time spent in WAITING phase for request."),
        ("vllm:request_inference_time_seconds", "Time spent in RUNNING phase for request."),
        ("vllm:request_prefill_time_seconds", "Time spent in PREFILL phase for request."),
        ("vllm:request_decode_time_seconds", "Time spent in DECODE phase for request."),
    ):
        histogram(name, doc, REQUEST_LATENCY, 3.0)
    family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    lines.append('vllm:cache_config_info{block_size="16",cache_dtype="auto",'
                 'enable_prefix_caching="True",gpu_memory_utilization="0.9",'
                 'num_cpu_blocks="2048",num_gpu_blocks="26307",prefix_caching_hash_algo="builtin",'
                 'swap_space="4"} 1.0')  # fmt: skip
    handlers = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")
    family("http_requests_total", "counter", "Total number of requests by method, status, handler.")
    for handler in handlers:
        lines.append(f'http_requests_total{{handler="{handler}",method="POST",status="2xx"}} 99.0')
    for name in ("http_request_size_bytes", "http_response_size_bytes"):
        family(name, "summary", "Content length of requests and responses.")
        for handler in handlers:
            lines.append(f'{name}_count{{handler="{handler}"}} 99.0')
            lines.append(f'{name}_sum{{handler="{handler}"}} 12345.0')
            lines.append(f'{name}_created{{handler="{handler}"}} 1.733e+09')
    family("http_request_duration_highr_seconds", "histogram", "Latency, many buckets.")
    total = 0
    for bound in (*HTTP_HIGHR, float("inf")):
        total += 11
        lines.append(f'http_request_duration_highr_seconds_bucket{{le="{_fmt(bound)}"}} {total}.0')
    lines.append(f"http_request_duration_highr_seconds_count {total}.0")
    lines.append(f"http_request_duration_highr_seconds_sum {total * 0.4}")
    family("http_request_duration_seconds", "histogram", "Latency, few buckets, by handler.")
    for handler in handlers:
        for bound in ("0.1", "0.5", "1.0", "+Inf"):
            lines.append(
                f'http_request_duration_seconds_bucket{{handler="{handler}",le="{bound}",'
                f'method="POST"}} 99.0'
            )
        lines.append(f'http_request_duration_seconds_count{{handler="{handler}",method="POST"}} 99')
        lines.append(f'http_request_duration_seconds_sum{{handler="{handler}",method="POST"}} 9.9')
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the pre-change parts


def legacy_parse(text: str, engine: str = "vllm", layout: Any = None) -> Any:
    """The adapter as it was before this benchmark existed: every family of the page
    through the general Prometheus text parser (`layout`, the current adapter's, unused).
    The baseline, nothing routes with it."""
    from prometheus_client.parser import text_string_to_metric_families

    from inference_gateway.core.endpoints.adapters import ENGINES
    from inference_gateway.core.scheduling.types import PodMetrics

    names = ENGINES[engine]
    values: dict[str, float] = {}
    lora: dict[str, str] = {}
    stamp = float("-inf")
    cache: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == "vllm:lora_requests_info":
                if sample.value >= stamp:
                    stamp, lora = sample.value, sample.labels
            elif sample.name in ("vllm:cache_config_info", "sglang:cache_config_info"):
                cache = sample.labels
            elif sample.name not in values:
                values[sample.name] = sample.value

    def first(keys: list[str]) -> float:
        return next((values[k] for k in keys if k in values), 0.0)

    def split(value: str | None) -> frozenset[str]:
        return frozenset(a for a in (value or "").split(",") if a)

    return PodMetrics(
        waiting=int(first(names["waiting"])),
        running=int(first(names["running"])),
        kv_usage=float(first(names["kv"])),
        running_adapters=split(lora.get("running_lora_adapters")),
        waiting_adapters=split(lora.get("waiting_lora_adapters")),
        max_loras=int(float(lora.get("max_lora") or 0)),
        block_size=int(float(cache.get("block_size") or 16)),
        num_gpu_blocks=int(float(cache.get("num_gpu_blocks") or 0)),
    )


def legacy_fetch() -> Any:
    """The picker's pre-change scrape client: aiohttp's general client session."""
    import aiohttp

    holder: dict[str, aiohttp.ClientSession] = {}

    async def fetch(endpoint: Any, path: str) -> str:
        session = holder.get("s")
        if session is None:
            session = holder["s"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        async with session.get(f"http://{endpoint.hostport}{path}") as response:
            response.raise_for_status()
            return await response.text()

    return fetch


# ---------------------------------------------------------------- 1. parse cost


def parse_cost(repeat: int) -> dict[str, Any]:
    from inference_gateway.core.endpoints.adapters import parse_metrics

    out: dict[str, Any] = {}
    for lora in (False, True):
        page = vllm_page(lora=lora)
        assert legacy_parse(page) == parse_metrics(page), "the two parsers disagree"
        row: dict[str, Any] = {"page_bytes": len(page.encode())}
        for label, parse in (("legacy", legacy_parse), ("adapter", parse_metrics)):
            runs = max(20, repeat // (50 if label == "legacy" else 1))
            start = time.process_time()
            for _ in range(runs):
                parse(page)
            row[f"{label}_us"] = round((time.process_time() - start) / runs * 1e6, 1)
        row["speedup"] = round(row["legacy_us"] / max(row["adapter_us"], 0.01), 1)
        out["lora" if lora else "plain"] = row
    out["render"] = render_cost(repeat)
    return out


def render_cost(repeat: int) -> dict[str, Any]:
    """The pod's side of one scrape: prometheus_client rendering the page's families,
    the whole page (`/metrics`) against the picker's filtered one (`/metrics/?name[]=…`,
    the restricted registry vLLM's ASGI mount serves)."""
    from prometheus_client import generate_latest

    from inference_gateway.core.endpoints.adapters import FILTERED_NAMES

    registry = page_registry(vllm_page())
    restricted = registry.restricted_registry(FILTERED_NAMES["vllm"])
    row: dict[str, Any] = {}
    for label, target in (("whole", registry), ("filtered", restricted)):
        runs = max(20, repeat // 10)
        start = time.process_time()
        for _ in range(runs):
            body = generate_latest(target)
        row[f"{label}_us"] = round((time.process_time() - start) / runs * 1e6, 1)
        row[f"{label}_bytes"] = len(body)
    row["ratio"] = round(row["whole_us"] / max(row["filtered_us"], 0.01), 1)
    return row


# ---------------------------------------------------------------- 2. idle CPU


def page_registry(page: str) -> Any:
    """`page`'s families in a prometheus_client registry whose names are known, as vLLM's
    registered metrics are (what `restricted_registry` needs)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(page))

    class Families:
        def collect(self) -> Any:
            return iter(families)

        describe = collect

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())  # type: ignore[arg-type]
    return registry


class Pages:
    """What a synthetic vLLM pod answers: `/metrics` whole (`vllm_page`, a counter that
    moves on every scrape) and `/metrics/?name[]=…` (the picker's `FILTERED_PATHS`) as
    prometheus_client's restricted registry renders those families of the same page,
    its KV gauge moving on every scrape. No "unchanged page" shortcut flatters either."""

    def __init__(self) -> None:
        from prometheus_client import generate_latest

        from inference_gateway.core.endpoints.adapters import FILTERED_NAMES

        page = vllm_page()
        self.head, _, tail = page.partition("process_cpu_seconds_total ")
        self.tail = tail.partition("\n")[2]
        registry = page_registry(page)
        filtered = generate_latest(registry.restricted_registry(FILTERED_NAMES["vllm"])).decode()
        kv = filtered.index("vllm:kv_cache_usage_perc{")
        value = filtered.index("} ", kv) + 2
        self.filtered_head = filtered[:value]
        self.filtered_tail = filtered[filtered.index("\n", value) :]
        self.served = 0

    def body(self, request_line: bytes) -> bytes:
        """The body for a GET of a metrics page (`request_line`: its first line)."""
        self.served += 1
        if b" /metrics/?" in request_line:
            usage = self.served % 1000 / 1000
            return f"{self.filtered_head}{usage}{self.filtered_tail}".encode()
        return f"{self.head}process_cpu_seconds_total {self.served}\n{self.tail}".encode()


def _serve_pods(ports_fd_path: str, count: int) -> None:
    """Child process: `count` pods on loopback serving the pages; writes the ports."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    models = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
    pages = Pages()

    class Pod(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
                request, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
                line = request.split(b"\r\n", 1)[0]
                body = models if b" /v1/models " in line else pages.body(line)
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        servers = [await loop.create_server(Pod, "127.0.0.1", 0) for _ in range(count)]
        ports = [s.sockets[0].getsockname()[1] for s in servers]
        with open(ports_fd_path, "w") as f:
            json.dump(ports, f)
        await asyncio.Event().wait()

    asyncio.run(main())


def _run_picker(ports: list[int], seconds: float, path: str) -> dict[str, Any]:
    """Child process: an idle `igw picker` over the pods; its own CPU over `seconds`."""
    import uvloop

    from inference_gateway.assembly.picker import build_picker
    from inference_gateway.core.endpoints import store as store_module
    from inference_gateway.core.scheduling.types import Endpoint

    endpoints = [
        Endpoint(name=f"pod-{i}", address="127.0.0.1", port=p, pool="default")
        for i, p in enumerate(ports)
    ]
    kwargs: dict[str, Any] = {}
    if path in ("whole", "legacy"):  # pods that do not filter: every scrape reads the page
        store_module.FILTERED_PATHS = {}  # type: ignore[attr-defined]
    if path == "legacy":
        store_module.parse_metrics = legacy_parse  # type: ignore[attr-defined]
        kwargs["fetch"] = legacy_fetch()

    async def main() -> dict[str, Any]:
        picker = build_picker(
            endpoints, None, host="127.0.0.1", grpc_port=0, metrics_port=None, **kwargs
        )
        if path == "legacy" and hasattr(picker.store, "max_cpu_fraction"):
            picker.store.max_cpu_fraction = None  # a fixed interval, as before
        await picker.start()
        await asyncio.sleep(1.0)  # connections warm, first adaptation done
        rounds0, cpu0, wall0 = picker.store.scrapes, time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        rounds = picker.store.scrapes - rounds0
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        ready = len(picker.store.ready())
        interval = picker.store.interval_s
        await picker.stop(grace_s=0)
        return {
            "core_fraction": round(cpu / wall, 3),
            "rounds_per_s": round(rounds / wall, 1),
            "cpu_us_per_scrape": round(cpu / max(1, rounds * len(ports)) * 1e6, 1),
            "estimated_us_per_scrape": (
                round(picker.store.round_cpu_s / len(ports) * 1e6, 1) if path != "legacy" else None
            ),
            "interval_ms": round(getattr(picker.store, "current_interval_s", interval) * 1000, 1),
            "ready_pods": ready,
        }

    return uvloop.run(main())


def idle_cpu(pods: int, seconds: float, path: str) -> dict[str, Any]:
    with _PodFleet(pods) as ports:
        child = subprocess.run(
            [sys.executable, __file__, "--picker-child", path, "--seconds", str(seconds)],
            input=json.dumps(ports),
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        )
    row: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    # the shipped paths must keep every pod routable, or the figure measures failures (the
    # legacy path's general parser cannot keep up at 1,024 pods: its `ready` says so)
    if row["ready_pods"] != pods and path != "legacy":
        raise RuntimeError(f"{path}: {row['ready_pods']} of {pods} pods ready after the window")
    return row


class _PodFleet:
    def __init__(self, count: int) -> None:
        self.count = count

    def __enter__(self) -> list[int]:
        import tempfile

        self.tmp = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
        self.tmp.close()
        os.unlink(self.tmp.name)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--pods-child", self.tmp.name, "--count", str(self.count)]
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.path.exists(self.tmp.name) and os.path.getsize(self.tmp.name) > 0:
                with open(self.tmp.name) as f:
                    return list(json.load(f))
            time.sleep(0.05)
        raise RuntimeError("the pod process did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.unlink(self.tmp.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=4.0, help="idle window per case")
    parser.add_argument("--pods", default="4,32,128", help="pod counts for the idle CPU")
    parser.add_argument(
        "--paths",
        default="current,whole,legacy",
        help="current (filtered pages), whole (pods that do not filter), legacy (pre-change parts)",
    )
    parser.add_argument("--repeat", type=int, default=2000, help="parses timed per parser")
    parser.add_argument("--pods-child", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--picker-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pods_child:
        _serve_pods(args.pods_child, args.count)
        return 0
    if args.picker_child:
        ports = json.loads(sys.stdin.read())
        print(json.dumps(_run_picker(ports, args.seconds, args.picker_child)))
        return 0
    try:
        counts = [int(n) for n in args.pods.split(",") if n]
    except ValueError:
        print("--pods takes comma-separated integers", file=sys.stderr)
        return 2
    result: dict[str, Any] = {"parse": parse_cost(args.repeat), "idle": {}}
    for path in args.paths.split(","):
        for count in counts:
            print(f"idle picker, {count} pods, {path} …", file=sys.stderr)
            result["idle"][f"{path}/{count}"] = idle_cpu(count, args.seconds, path)
    result["load_1min"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    render = result["parse"].pop("render")
    print(
        f"pod side, prometheus_client render: whole {render['whole_bytes']} B "
        f"{render['whole_us']:.1f} µs, filtered {render['filtered_bytes']} B "
        f"{render['filtered_us']:.1f} µs ({render['ratio']}x)"
    )
    for kind, row in result["parse"].items():
        print(
            f"parse {kind:5s} page {row['page_bytes']:6d} B: legacy {row['legacy_us']:8.1f} µs, "
            f"adapter {row['adapter_us']:6.1f} µs ({row['speedup']}x)"
        )
    for key, row in result["idle"].items():
        print(
            f"idle {key:14s} {row['core_fraction']:.3f} core, {row['rounds_per_s']:5.1f} rounds/s,"
            f" {row['cpu_us_per_scrape']:7.1f} µs/scrape"
            f" (store's estimate {row['estimated_us_per_scrape']}),"
            f" interval {row['interval_ms']} ms,"
            f" {row['ready_pods']} ready"
        )
    print(f"1-min load average at the end: {result['load_1min']} (a shared machine inflates all)")
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    sys.exit(main())
