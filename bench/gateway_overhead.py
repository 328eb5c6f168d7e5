"""Gateway overhead: what the proxy and the picker add to a request (a benchmark, not a test).

1. Proxy: a zero-delay model server (answers at once, vLLM metric names, no engine) is
   called at 200 requests/s open-loop, directly and through `igw serve`, each in its own
   process, the two paths interleaved request by request so both see the same machine.
   Reported: p50 and p99 of each and of the difference, and the machine's 1-minute load
   average before and after the run: pod, gateway and client share the machine's cores,
   so any other load inflates both paths and the difference (compare runs at like load).
   The two requests of a pair start together, so each meets a machine its twin has woken
   (and may queue behind it at the pod or in the client). Starting them half a period
   apart instead, each meets an idle machine and pays every wake-up on its path: on a
   2-vCPU VM that measured about 0.3 ms more added at p50 (1.3 vs 1.0 ms).
2. Closed loop (`closed_loop`): 64 clients each send their next request as soon as the
   last is answered, direct to the pod, through `igw serve` with its defaults, and through
   one without the saturation detector's queue term, in alternating 3 s phases (two
   rounds, the second in reverse order): requests/s, each process's CPU in cores
   (`/proc/PID/stat`), the gateway's CPU per request and its admission queue (the
   flow-control gauge, sampled every 100 ms).
   With a zero-delay pod the queue term (scraped waiting + requests sent since the scrape
   without an answer, full at 5) holds most of the 64 in the admission queue while the
   pod idles: that, not the gateway's CPU, caps its closed-loop rate (docs/operations.md).
3. Against the Rust router (issue 32): vllm-project/router (`vllm-router`, pinned in
   requirements/bench.txt) runs beside `igw serve` in front of the same pod, one more path
   of the open loop (interleaved as above) and of the closed loop, and a last table sets
   `igw serve` against it: added p50/p99, CPU per request (each router's `/proc` CPU over
   the loop), requests/s, with issue 32's bar (added latency at most the Rust router's,
   CPU per request at most 1.2x its). Beside the bar it prints the zero-delay pod's own
   CPU per answer over the same loop: the pod is an aiohttp server that reads a request
   and writes a canned response, so that is what `igw serve`'s server side costs before
   it parses, routes or proxies anything. `--no-vllm-router` leaves it out.
4. Picker: one scheduling decision (`latency` profile, prefix hashes of a 2 KB prompt)
   over 256 endpoints with random metrics, timed in-process.

Run: `.venv/bin/python bench/gateway_overhead.py [--json] [--requests N] [--only-closed-loop]
[--baseline-src DIR]`.

`--baseline-src DIR` also starts an `igw serve` from another source tree's `gateway_src`
(a worktree of an older commit, say) beside this tree's, in the same run: the open loop
interleaves direct, baseline and this gateway request by request (the order rotating), the
closed loop alternates their phases, and a last table sets this tree's CPU per request,
requests/s and added p50/p99 against the baseline's (the picker figure and the diagnosis
path are left out: bench/picker_throughput.py has its own `--baseline-src`).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
from aiohttp import web

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.plugins.prefix import prompt_block_hashes

MODEL = "llama-3.1-8b"
METRICS = (
    "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n"
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="26307"} 1\n'
)
ANSWER = orjson.dumps(
    {
        "id": "cmpl-0",
        "object": "text_completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
    }
)


def zero_delay_pod(metrics_delay_s: float = 0.0) -> web.Application:
    """`metrics_delay_s`: `/metrics` answers that late (below 0: never; bench/slow_pod.py)."""
    app = web.Application()

    async def metrics(_: web.Request) -> web.Response:
        if metrics_delay_s < 0:
            await asyncio.Event().wait()
        elif metrics_delay_s:
            await asyncio.sleep(metrics_delay_s)
        return web.Response(text=METRICS)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    async def health(_: web.Request) -> web.Response:
        return web.Response()

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)  # vllm-router's worker health check
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", complete)
    return app


_HANDED_OUT: set[int] = set()


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A folder for one run's configs and its processes' logs (stop them inside the
    block): removed when the run ends, kept and named on stderr when it ends in an error,
    for the logs that say why. Each run left one behind in the temp folder before."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    except BaseException:
        print(
            f"{prefix.rstrip('-')}: the run failed; its configs and logs are in {folder}",
            file=sys.stderr,
        )
        raise
    shutil.rmtree(folder, ignore_errors=True)


def folder_until_exit(prefix: str) -> Path:
    """A folder for the files of a process its caller stops later (a config it reads at
    start and on change): removed when this interpreter exits."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def free_port() -> int:
    """A port free now and not handed out before in this run: the processes bind theirs
    only once started, so the kernel may offer a port twice in between."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


async def wait_ready(session: aiohttp.ClientSession, url: str, deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            async with session.get(url) as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {deadline_s} s")


BODY = orjson.dumps({"model": MODEL, "prompt": "hello " * 40, "max_tokens": 1})


def start_gateway(
    pod_port: int, config: str | None = None, src: str | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """`igw serve` in front of the pod, in its own process, as it would run in a cluster
    (the client's CPU counts against neither). `config`: its config YAML text (default:
    none, the built-in defaults); `src`: a source tree whose `gateway_src` it runs instead
    of this one."""
    port = free_port()
    folder = folder_until_exit("igw-overhead-")
    (folder / "endpoints.yaml").write_text(
        f"endpoints: [{{name: pod-0, address: 127.0.0.1, port: {pod_port}}}]\n"
    )
    extra: list[str] = []
    if config is not None:
        (folder / "config.yaml").write_text(config)
        extra = ["--config", str(folder / "config.yaml")]
    module, env = "inference_gateway.cli.main", dict(os.environ)
    if src is not None:
        source = Path(src).resolve() / "gateway_src"
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
        if not (source / "inference_gateway" / "cli" / "main.py").exists():
            module = "inference_gateway.cli"  # older trees: the CLI was one module
    argv = [sys.executable, "-m", module, "serve"]
    argv += ["--endpoints", str(folder / "endpoints.yaml"), "--port", str(port), *extra]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env), port


def start_vllm_router(pod_port: int) -> tuple[subprocess.Popen[bytes], int]:
    """vllm-project/router (PyPI `vllm-router`, pinned in requirements/bench.txt), the Rust
    router of vLLM's production stack, in front of the same pod: round robin over one
    worker, its retries and circuit breaker left at their defaults (as a user runs it)."""
    port = free_port()
    argv = [str(Path(sys.executable).parent / "vllm-router"), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--worker-urls", f"http://127.0.0.1:{pod_port}"]
    argv += ["--policy", "round_robin", "--log-level", "error"]
    argv += ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port


def has_vllm_router() -> bool:
    return (Path(sys.executable).parent / "vllm-router").exists()


def quantiles_ms(latencies: list[float], direct: np.ndarray[Any, Any]) -> dict[str, float]:
    """p50/p99 of a path and what it adds over the direct path's p50/p99, in ms."""
    v = np.asarray(latencies) * 1000
    return {
        "p50_ms": float(np.percentile(v, 50)),
        "p99_ms": float(np.percentile(v, 99)),
        "added_p50_ms": float(np.percentile(v, 50) - np.percentile(direct, 50)),
        "added_p99_ms": float(np.percentile(v, 99) - np.percentile(direct, 99)),
    }


async def proxy_overhead(
    requests: int, rate: float, baseline_src: str | None = None, vllm_router: bool = False
) -> dict[str, Any]:
    """Open loop at `rate`, direct and through the gateway (with `baseline_src`, through
    the baseline tree's gateway too; with `vllm_router`, through the Rust vllm-router),
    interleaved request by request. Each router's CPU over the loop, per request, from
    `/proc` (each process serves only its own path's requests)."""
    pod_port = free_port()
    pod = subprocess.Popen([sys.executable, __file__, "--serve-pod", str(pod_port)])
    gateway, gw_port = start_gateway(pod_port)
    routers = {"gateway": gateway}
    body = BODY
    load_before = os.getloadavg()[0]
    latencies: dict[str, list[float]] = {"direct": [], "gateway": []}
    paths = [(pod_port, latencies["direct"]), (gw_port, latencies["gateway"])]
    ready = {gw_port: "/health"}
    if baseline_src is not None:
        routers["baseline"], base_port = start_gateway(pod_port, src=baseline_src)
        latencies["baseline"] = []
        paths.append((base_port, latencies["baseline"]))
        ready[base_port] = "/health"
    if vllm_router:
        routers["vllm-router"], router_port = start_vllm_router(pod_port)
        latencies["vllm-router"] = []
        paths.append((router_port, latencies["vllm-router"]))
        ready[router_port] = "/v1/models"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            await wait_ready(session, f"http://127.0.0.1:{pod_port}/metrics")
            for port, route in ready.items():
                await wait_ready(session, f"http://127.0.0.1:{port}{route}")

            async def call(port: int, out: list[float]) -> None:
                start = time.perf_counter()
                async with session.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    data=body,
                    headers={"content-type": "application/json"},
                ) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status} from port {port}")
                out.append(time.perf_counter() - start)

            for _ in range(100):  # warm connections and the picker
                for port, _ in paths:
                    await call(port, [])
            cpu_before = {name: process_cpu_s(p.pid) for name, p in routers.items()}
            pod_cpu_before = process_cpu_s(pod.pid)
            tasks = []
            start = time.perf_counter()
            for i in range(requests):
                await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
                turn = i % len(paths)  # each path goes first as often as the others
                for port, out in paths[turn:] + paths[:turn]:
                    tasks.append(asyncio.create_task(call(port, out)))
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=300)
            cpu_ms = {
                name: (process_cpu_s(p.pid) - cpu_before[name]) * 1000 / requests
                for name, p in routers.items()
            }
            # every path's request is one answer of the pod's (its scrapes and health
            # checks, a few a second, are counted in too)
            pod_cpu_ms = (process_cpu_s(pod.pid) - pod_cpu_before) * 1000 / (requests * len(paths))
    finally:
        for process in (*routers.values(), pod):
            process.terminate()
            process.wait(timeout=10)
    d = np.asarray(latencies["direct"]) * 1000
    g = quantiles_ms(latencies["gateway"], d)
    extra: dict[str, Any] = {}
    if "baseline" in latencies:
        b = quantiles_ms(latencies["baseline"], d)
        extra |= {f"baseline_{key}": value for key, value in b.items()}
    if "vllm-router" in latencies:
        extra["vllm_router"] = {
            **quantiles_ms(latencies["vllm-router"], d),
            "cpu_ms_per_request": cpu_ms["vllm-router"],
        }
    return {
        "requests_each": requests,
        "rate_rps": rate,
        "direct_p50_ms": float(np.percentile(d, 50)),
        "direct_p99_ms": float(np.percentile(d, 99)),
        "gateway_p50_ms": g["p50_ms"],
        "gateway_p99_ms": g["p99_ms"],
        "added_p50_ms": g["added_p50_ms"],
        "added_p99_ms": g["added_p99_ms"],
        "gateway_cpu_ms_per_request": cpu_ms["gateway"],
        "pod_cpu_ms_per_request": pod_cpu_ms,
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
        **extra,
    }


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process so far (Linux `/proc/PID/stat`)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def admission_queue(metrics_page: str) -> float:
    """Requests waiting for admission in the gateway, summed over pools and bands."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_page.splitlines()
        if line.startswith("inference_extension_flow_control_queue_size{")
    )


# the saturation detector without its queue term (waiting + sent since the scrape >= 5):
# the kv-cache and pending-prefill terms still apply
QUEUE_TERM_OFF = (
    "flowControl:\n  saturation:\n"
    "    queueThreshold: 1000000000\n    noncriticalQueueThreshold: 1000000000\n"
)


async def closed_loop(
    concurrency: int,
    phase_s: float,
    rounds: int,
    max_requests: int,
    gateways: dict[str, tuple[str | None, str | None]],
    vllm_router: bool = False,
) -> dict[str, Any]:
    """`concurrency` clients, each sending its next request as soon as its last answer
    is in, direct to the pod and through each gateway of `gateways` (name: its config YAML
    text, None for the defaults, and the source tree it runs, None for this one; each its
    own `igw serve` in front of the same pod) in
    alternating phases of `phase_s` (`rounds` of each, at most `max_requests` per phase),
    so all paths see the same machine. Reported per path: requests/s, and the CPU of the
    pod, the gateway and the client (cores: CPU seconds over wall seconds). During a
    gateway's phases its admission-queue gauge is sampled every 100 ms (mean and peak):
    requests held there while the pod is idle are the saturation detector's doing.
    `vllm_router`: the Rust vllm-router in front of the same pod is one more path."""
    pod_port = free_port()
    pod = subprocess.Popen([sys.executable, __file__, "--serve-pod", str(pod_port)])
    started = {
        name: start_gateway(pod_port, config, src) for name, (config, src) in gateways.items()
    }
    if vllm_router:
        started["vllm-router"] = start_vllm_router(pod_port)
    ports = {"direct": pod_port, **{name: port for name, (_, port) in started.items()}}
    cpu_of = {name: proc for name, (proc, _) in started.items()}
    figures = {
        path: dict.fromkeys(("requests", "wall_s", "pod", "gw", "client"), 0.0) for path in ports
    }
    queues: dict[str, list[float]] = {name: [] for name in gateways}
    load_before = os.getloadavg()[0]
    try:
        connector = aiohttp.TCPConnector(limit=0)  # aiohttp's default 100 must not cap us
        async with aiohttp.ClientSession(connector=connector) as session:
            for port in ports.values():
                await wait_ready(session, f"http://127.0.0.1:{port}/v1/models")

            async def phase(path: str) -> None:
                port, figure, gateway = ports[path], figures[path], cpu_of.get(path)
                url = f"http://127.0.0.1:{port}/v1/completions"
                end = time.monotonic() + phase_s
                sent = 0

                async def client() -> None:
                    nonlocal sent
                    while time.monotonic() < end and sent < max_requests:
                        sent += 1
                        async with session.post(
                            url, data=BODY, headers={"content-type": "application/json"}
                        ) as r:
                            await r.read()
                            if r.status != 200:
                                raise RuntimeError(f"HTTP {r.status} from {path}")
                        figure["requests"] += 1

                async def sampler() -> None:
                    while time.monotonic() < end:
                        async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
                            queues[path].append(admission_queue(await r.text()))
                        await asyncio.sleep(0.1)

                def cpu() -> tuple[float, float, float]:
                    gw = process_cpu_s(gateway.pid) if gateway is not None else 0.0
                    return process_cpu_s(pod.pid), gw, time.process_time()

                before, start = cpu(), time.perf_counter()
                jobs = [client() for _ in range(concurrency)]
                jobs += [sampler()] if path in queues else []
                await asyncio.wait_for(asyncio.gather(*jobs), timeout=phase_s + 30)
                figure["wall_s"] += time.perf_counter() - start
                for key, was, now in zip(("pod", "gw", "client"), before, cpu(), strict=True):
                    figure[key] += now - was

            for _ in range(100):  # warm connections and the pickers
                for port in ports.values():
                    async with session.post(
                        f"http://127.0.0.1:{port}/v1/completions", data=BODY
                    ) as r:
                        await r.read()
            for r in range(rounds):  # odd rounds in reverse: no path always follows another
                for path in list(ports) if r % 2 == 0 else list(ports)[::-1]:
                    await phase(path)
    finally:
        for process in [*cpu_of.values(), pod]:
            process.terminate()
            process.wait(timeout=10)
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "phase_s": phase_s,
        "rounds": rounds,
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
        "paths": {},
    }
    direct_rps = figures["direct"]["requests"] / figures["direct"]["wall_s"]
    for path, f in figures.items():
        wall = f["wall_s"]
        row: dict[str, float] = {
            "requests": int(f["requests"]),
            "rps": f["requests"] / wall,
            "over_direct": f["requests"] / wall / direct_rps,
            "pod_cores": f["pod"] / wall,
            "gateway_cores": f["gw"] / wall,
            "client_cores": f["client"] / wall,
        }
        if path in cpu_of:
            row["cpu_ms_per_request"] = f["gw"] * 1000 / max(1, f["requests"])
        if path in queues:
            row["admission_queue_mean"] = float(np.mean(queues[path] or [0.0]))
            row["admission_queue_max"] = float(max(queues[path], default=0.0))
        out["paths"][path] = row
    return out


def picker_decision(pods: int, decisions: int) -> dict[str, float]:
    rnd = random.Random(1)
    endpoints = [
        Endpoint(
            f"pod-{i}",
            "10.0.0.1",
            8000 + i,
            pool="p",
            index=i,
            stale=False,
            labels={"igw.dev/gpu": rnd.choice(["H100", "A10G"])},
            metrics=PodMetrics(
                waiting=rnd.randrange(8),
                running=rnd.randrange(64),
                kv_usage=rnd.random(),
                num_gpu_blocks=26307,
            ),
        )
        for i in range(pods)
    ]
    scheduler = Scheduler(GatewayConfigSpec(), seed=1)
    prompts = [f"system prompt {g} " * 60 + f"question {q}" for g in range(8) for q in range(16)]
    times = []
    for i in range(decisions):
        text = prompts[i % len(prompts)]
        request = LLMRequest(
            str(i),
            MODEL,
            prompt_tokens=len(text) // 4,
            prefix_hashes=prompt_block_hashes(MODEL, text),
        )
        start = time.perf_counter()
        ranked = scheduler.schedule(request, endpoints)
        times.append(time.perf_counter() - start)
        scheduler.on_picked(request, ranked[0], 0.0)
        scheduler.on_finished(request, ranked[0], 0.0)
    t = np.asarray(times) * 1000
    return {
        "endpoints": pods,
        "decisions": decisions,
        "p50_ms": float(np.percentile(t, 50)),
        "p99_ms": float(np.percentile(t, 99)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per path")
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s per path")
    parser.add_argument(
        "--concurrency", type=int, default=64, help="closed loop: requests in flight"
    )
    parser.add_argument(
        "--phase-s", type=float, default=3.0, help="closed loop: seconds per path per round"
    )
    parser.add_argument("--rounds", type=int, default=2, help="closed loop: rounds per path")
    parser.add_argument(
        "--only-closed-loop", action="store_true", help="skip the open loop and the picker"
    )
    parser.add_argument(
        "--no-diagnosis",
        action="store_true",
        help="closed loop: leave out the gateway without the saturation detector's queue term",
    )
    parser.add_argument(
        "--baseline-src", help="source tree whose gateway runs beside this one's, side by side"
    )
    parser.add_argument(
        "--no-vllm-router",
        action="store_true",
        help="leave out the Rust vllm-router (run beside igw serve when installed)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve-pod", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_pod:
        web.run_app(
            zero_delay_pod(), host="127.0.0.1", port=args.serve_pod, print=None, access_log=None
        )
        return 0
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    result: dict[str, Any] = {}
    baseline = args.baseline_src
    peer = has_vllm_router() and not args.no_vllm_router
    if not args.only_closed_loop:
        result["proxy"] = asyncio.run(proxy_overhead(args.requests, args.rate, baseline, peer))
        if baseline is None:
            result["picker"] = picker_decision(256, 3000)
    gateways: dict[str, tuple[str | None, str | None]] = {"gateway": (None, None)}
    if baseline is not None:
        gateways["baseline"] = (None, baseline)
    elif not args.no_diagnosis:
        gateways["gateway_no_queue_term"] = (QUEUE_TERM_OFF, None)
    result["closed_loop"] = asyncio.run(
        closed_loop(args.concurrency, args.phase_s, args.rounds, 100_000, gateways, peer)
    )
    if peer and "proxy" in result:
        result["versus_vllm_router"] = versus_vllm_router(result)
    if baseline is not None:
        result["versus_baseline"] = versus_baseline(result, baseline)
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if "proxy" in result:
        print_open_loop(result["proxy"], result.get("picker"))
    print_closed_loop(result["closed_loop"])
    if "versus_baseline" in result:
        print_versus_baseline(result["versus_baseline"])
    if "versus_vllm_router" in result:
        print_versus_vllm_router(result["versus_vllm_router"])
    return 0


#: issue 32's bar for `igw serve` against the Rust router, same harness, same run
ROUTER_BAR = {"open_loop_added_p50_ms": 1.0, "open_loop_added_p99_ms": 1.0}
ROUTER_BAR |= {"open_loop_cpu_ms_per_request": 1.2}


def versus_vllm_router(result: dict[str, Any]) -> dict[str, Any]:
    """`igw serve` against vllm-router from the same run: (vllm-router, igw serve, ratio)
    per figure, and whether each ratio is within its bar (ROUTER_BAR: added latency at
    most the Rust router's, CPU per request at most 1.2x its)."""
    p, c = result["proxy"], result["closed_loop"]["paths"]
    r = p["vllm_router"]
    rows = {
        "open_loop_added_p50_ms": (r["added_p50_ms"], p["added_p50_ms"]),
        "open_loop_added_p99_ms": (r["added_p99_ms"], p["added_p99_ms"]),
        "open_loop_cpu_ms_per_request": (r["cpu_ms_per_request"], p["gateway_cpu_ms_per_request"]),
        "closed_loop_cpu_ms_per_request": (
            c["vllm-router"]["cpu_ms_per_request"],
            c["gateway"]["cpu_ms_per_request"],
        ),
        "closed_loop_rps": (c["vllm-router"]["rps"], c["gateway"]["rps"]),
    }
    figures: dict[str, Any] = {}
    for name, (rust, ours) in rows.items():
        ratio = ours / rust if rust > 0 else None
        bar = ROUTER_BAR.get(name)
        # an added latency at or below the direct path's noise counts as met when ours is
        # no larger in absolute terms
        held = None if bar is None else (ours <= rust if ratio is None else ratio <= bar)
        figures[name] = {"vllm_router": rust, "igw_serve": ours, "ratio": ratio, "held": held}
    # what the CPU bar leaves igw serve, beside what an aiohttp server spends only to
    # answer (the pod: read a request, write a canned response, nothing else)
    floor = {
        "cpu_bar_ms_per_request": ROUTER_BAR["open_loop_cpu_ms_per_request"]
        * r["cpu_ms_per_request"],
        "aiohttp_answer_cpu_ms_per_request": p["pod_cpu_ms_per_request"],
    }
    return {"rate_rps": p["rate_rps"], "figures": figures, "floor": floor}


def print_versus_vllm_router(v: dict[str, Any]) -> None:
    print(
        "igw serve against vllm-router (Rust, same pod, same run; "
        f"open loop {v['rate_rps']:.0f} req/s)"
    )
    print(f"  {'figure':32} {'vllm-router':>11} {'igw serve':>10} {'ratio':>7}  bar")
    for name, f in v["figures"].items():
        ratio = "-" if f["ratio"] is None else f"{f['ratio']:.2f}"
        held = {None: "", True: "met", False: "MISSED"}[f["held"]]
        print(f"  {name:32} {f['vllm_router']:11.3f} {f['igw_serve']:10.3f} {ratio:>7}  {held}")
    floor = v["floor"]
    print(
        f"  the CPU bar leaves igw serve {floor['cpu_bar_ms_per_request']:.3f} ms a request; "
        f"the pod, an aiohttp server that only answers, spent "
        f"{floor['aiohttp_answer_cpu_ms_per_request']:.3f} ms on each"
    )


def versus_baseline(result: dict[str, Any], src: str) -> dict[str, Any]:
    """This tree's gateway against the baseline's, from the same run: (baseline, this,
    this / baseline) per figure."""
    rows: dict[str, list[float]] = {}
    paths = result["closed_loop"]["paths"]
    for key, figure in (("cpu_ms_per_request", "cpu_ms_per_request"), ("rps", "rps")):
        rows[f"closed_loop_{key}"] = [paths["baseline"][figure], paths["gateway"][figure]]
    if "proxy" in result:
        p = result["proxy"]
        for q in ("p50", "p99"):
            rows[f"open_loop_added_{q}_ms"] = [p[f"baseline_added_{q}_ms"], p[f"added_{q}_ms"]]
    return {
        "baseline_src": src,
        "figures": {
            name: {"baseline": b, "this": t, "ratio": t / b if b else None}
            for name, (b, t) in rows.items()
        },
    }


def print_open_loop(p: dict[str, float], k: dict[str, float] | None) -> None:
    print(
        f"proxy at {p['rate_rps']:.0f} req/s, {p['requests_each']} requests per path "
        f"(load average {p['load_1min_before']:.2f} before, {p['load_1min_after']:.2f} after)"
    )
    print(f"  direct   p50 {p['direct_p50_ms']:.2f} ms  p99 {p['direct_p99_ms']:.2f} ms")
    print(f"  gateway  p50 {p['gateway_p50_ms']:.2f} ms  p99 {p['gateway_p99_ms']:.2f} ms")
    print(
        f"  added    p50 {p['added_p50_ms']:.2f} ms  p99 {p['added_p99_ms']:.2f} ms "
        "(targets: <= 1 ms, <= 5 ms)"
    )
    if "baseline_p50_ms" in p:
        print(
            f"  baseline p50 {p['baseline_p50_ms']:.2f} ms  p99 {p['baseline_p99_ms']:.2f} ms; "
            f"added p50 {p['baseline_added_p50_ms']:.2f} ms  "
            f"p99 {p['baseline_added_p99_ms']:.2f} ms"
        )
    if k is None:
        return
    print(
        f"picker over {k['endpoints']} endpoints: p50 {k['p50_ms']:.3f} ms, "
        f"p99 {k['p99_ms']:.3f} ms (target: p99 <= 1 ms)"
    )


def print_closed_loop(c: dict[str, Any]) -> None:
    print(
        f"closed loop, {c['concurrency']} in flight, {c['rounds']} x {c['phase_s']:g} s per path "
        f"(load average {c['load_1min_before']:.2f} before, {c['load_1min_after']:.2f} after)"
    )
    for path, f in c["paths"].items():
        line = (
            f"  {path:24} {f['rps']:6.0f} req/s ({f['over_direct']:.2f} of direct)  "
            f"cores: pod {f['pod_cores']:.2f} gateway {f['gateway_cores']:.2f} "
            f"client {f['client_cores']:.2f}"
        )
        if "admission_queue_mean" in f:
            line += (
                f"; {f['cpu_ms_per_request']:.2f} ms CPU per request, admission "
                f"queue mean {f['admission_queue_mean']:.1f} peak {f['admission_queue_max']:.0f}"
            )
        print(line)


def print_versus_baseline(v: dict[str, Any]) -> None:
    print(f"this tree against the baseline ({v['baseline_src']}), same run")
    print(f"  {'figure':32} {'baseline':>9} {'this':>9} {'this/base':>9}")
    for name, f in v["figures"].items():
        ratio = "-" if f["ratio"] is None else f"{f['ratio']:.3f}"
        print(f"  {name:32} {f['baseline']:9.3f} {f['this']:9.3f} {ratio:>9}")


if __name__ == "__main__":
    sys.exit(main())
