"""Resume on break, measured (issue 33's benchmark; docs/migration.md): what a killed pod
costs a stream that `igw serve` resumes, and what resuming costs when nothing breaks.

Real processes on loopback: `--pods` emulated pods (`igw emulate`, one process each) and
two `igw serve` in front of the same pods, one with migration on (the default) and one
with `migration.enabled: false`. A closed loop of `--concurrency` clients streams chat
answers of `--tokens` tokens to prompts of about `--prompt-tokens`, at temperature 0
(each client sends its next request when its last one ends), so both phases run at the
same load. The default shape, six pods with three streams each, 1,000-token prompts and
300-token answers, is a small fleet's chat/RAG traffic; what a resume costs depends on
it (docs/migration.md, "What a resume costs"): a continuation re-prefills the prompt
plus the text delivered, and a lost pod's streams land on the survivors together, so
the gap is about (streams per survivor) x (prompt + delivered) / prompt fresh prefills.
Short prompts with long answers on few pods (`--pods 3 --prompt-tokens 125`) miss the
1.5x bar for that reason, not for the gateway's own time (the gateway's histogram is
read beside it).

1. **Nothing breaks** (`overhead`): each client alternates the two gateways request by
   request (half the clients start on each), `--rounds` requests per client. Per gateway:
   TTFT p50/p99, time per output token p50/p99 (end minus first token, over the tokens
   after the first), and its CPU per request (`/proc/PID/stat` over the phase). The bar is
   "within noise": the on-minus-off difference of the TTFT and TPOT medians, with a 95%
   bootstrap interval, must hold 0.
2. **A pod is killed mid-stream** (`resume`), through the migration-on gateway only:
   `--kills` times, once the streams run mid-answer, the pod serving the most of them is
   killed (SIGKILL), then started again on its port. Per stream that was mid-answer on
   it: the resume gap, client side (the longest silence between two content events that
   spans the kill: the last token before the break to the first after it), next to the
   TTFT of every fresh request of the same phase (same loop, same load; the few requests
   that were waiting for their first token on the killed pod are neither: the attempt
   plan retries them). The bar: resume gap p99 at most 1.5x fresh TTFT p99. The gateway's
   own `igw_request_resume_gap_seconds` (count and mean) is read beside it.

3. **A cluster is lost whole mid-stream** (`cluster_loss`, tier 2; `--cluster-kills`
   times, 0 leaves it out): the pods split into two clusters, each behind its own `igw
   serve` (tier 1 on), `igw global` in front of both (its defaults: migration on). The
   cluster serving the most streams mid-answer (by the `x-igw-cluster` header) loses
   its gateway and every pod (SIGKILL), then comes back on the same ports. The same
   figures as phase 2, against the fresh TTFT of the same loop, and `igw global`'s own
   histogram. A lost cluster is half the fleet here: its streams all re-prefill on the
   other half at once, so this gap is mostly the survivors' queue, not the router's.

Every stream must end with a `finish_reason` and no error; failures are counted.

    python bench/migration.py [--json] [--pods 6] [--concurrency 18] [--tokens 300]
        [--prompt-tokens 1000] [--rounds 4] [--kills 5] [--cluster-kills 3]

A benchmark, not a test: pods, gateways and client share the machine's cores; the load
average is reported. With few kills the p99 is the worst gap seen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_overhead import free_port, process_cpu_s, scratch_folder, wait_ready

MODEL = "llama-3.1-8b"
RESUME_BAR = 1.5  # issue 33: resume gap p99 <= 1.5x a fresh request's TTFT p99
SCRAPE = {"intervalMs": 100, "stalenessMs": 3000, "timeoutMs": 500}


@dataclass
class Stream:
    """One streamed request as the client saw it (monotonic seconds)."""

    gateway: str
    sent: float
    pod: str = ""
    times: list[float] = field(default_factory=list)  # one per content event
    end: float | None = None
    finish: str | None = None
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return self.times[0] - self.sent if self.times else None

    def tpot(self) -> float | None:
        if self.end is None or len(self.times) < 2:
            return None
        return (self.times[-1] - self.times[0]) / (len(self.times) - 1)

    def gap_across(self, at: float) -> float | None:
        """The longest silence between two content events that spans `at`."""
        gaps = [b - a for a, b in zip(self.times, self.times[1:], strict=False) if b >= at]
        return max(gaps) if gaps else None


class Pod:
    """One `igw emulate` process on a fixed port, killed and started again on it."""

    def __init__(self, name: str, log: Path) -> None:
        self.name, self.port, self.log = name, free_port(), log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "inference_gateway.cli.main", "emulate", "--gpu", "H100"]
        argv += ["--model", MODEL, "--name", self.name, "--port", str(self.port)]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


def start_serve(
    folder: Path, name: str, pods: list[Pod], migration: bool, port: int | None = None
) -> tuple[Any, int]:
    """`igw serve` over the pods in its own process (its CPU is its own), on `port` when
    given (a cluster gateway started again where `igw global` knows it)."""
    endpoints = [
        {"name": p.name, "address": "127.0.0.1", "port": p.port, "labels": {"igw.dev/pool": "p"}}
        for p in pods
    ]
    (folder / f"{name}-endpoints.yaml").write_text(yaml.safe_dump({"endpoints": endpoints}))
    config = {"scrape": SCRAPE, "migration": {"enabled": migration}}
    (folder / f"{name}-config.yaml").write_text(yaml.safe_dump(config))
    port = port or free_port()
    argv = [sys.executable, "-m", "inference_gateway.cli.main", "serve", "--port", str(port)]
    argv += ["--endpoints", str(folder / f"{name}-endpoints.yaml")]
    argv += ["--config", str(folder / f"{name}-config.yaml"), "--debug-destination-headers"]
    with (folder / f"{name}.log").open("ab") as out:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out)
    return process, port


class Cluster:
    """A cluster for tier 2: its own pods and its `igw serve` (tier 1 on), lost whole (the
    gateway and every pod killed) and started again on the same ports."""

    def __init__(self, folder: Path, name: str, pods: list[Pod]) -> None:
        self.folder, self.name, self.pods = folder, name, pods
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process, _ = start_serve(self.folder, self.name, self.pods, True, self.port)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        for pod in self.pods:
            pod.kill()


def start_global(folder: Path, clusters: list[Cluster]) -> tuple[Any, int]:
    """`igw global` over the clusters, one region, resume on break at tier 2 on (its
    defaults: a stall is 30 s of silence; a killed cluster resets its streams at once)."""
    config = {
        "homeRegion": "r1",
        "pollIntervalMs": 100,
        "staleAfterMs": 1000,
        "rampS": 0,
        "clusters": [{"name": c.name, "region": "r1", "endpoint": c.url} for c in clusters],
    }
    (folder / "global.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [sys.executable, "-m", "inference_gateway.cli.main", "global", "--port", str(port)]
    argv += ["--config", str(folder / "global.yaml")]
    with (folder / "global.log").open("ab") as out:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out)
    return process, port


def body(i: int, tokens: int, prompt_tokens: int) -> bytes:
    """Request `i`: a prompt of about `prompt_tokens` (the emulator's 4 bytes a token),
    unique from its first block on, and `tokens` to generate."""
    sentence = f"Question {i}: write a long essay about the sea and its tides. "
    question = sentence * max(1, round(prompt_tokens * 4 / len(sentence)))
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": question}],
            "max_tokens": tokens,
            "temperature": 0,
            "stream": True,
        }
    )


#: the response header that names where a stream runs: tier 1's pod, tier 2's cluster
POD_HEADER, CLUSTER_HEADER = "x-gateway-destination-endpoint", "x-igw-cluster"


async def stream(
    session: aiohttp.ClientSession, url: str, data: bytes, out: Stream, where: str = POD_HEADER
) -> None:
    """Send one request and time its content events; `out.pod` is the `where` header."""
    pending = b""
    try:
        async with session.post(
            url + "/v1/chat/completions", data=data, headers={"content-type": "application/json"}
        ) as response:
            out.pod = response.headers.get(where, "")
            if response.status != 200:
                out.error = f"HTTP {response.status}"
                return
            async for chunk in response.content.iter_any():
                now = time.monotonic()
                complete, _, pending = (pending + chunk).rpartition(b"\n\n")
                for event in complete.split(b"\n\n"):
                    payload = event.strip().removeprefix(b"data: ")
                    if not payload or payload == b"[DONE]":
                        continue
                    message = orjson.loads(payload)
                    if "error" in message:
                        out.error = str(message["error"])
                        return
                    for choice in message.get("choices", ()):
                        if choice.get("delta", {}).get("content"):
                            out.times.append(now)
                        if choice.get("finish_reason"):
                            out.finish = choice["finish_reason"]
    except aiohttp.ClientError as error:
        out.error = f"{type(error).__name__}: {error}"
    out.end = time.monotonic()


def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(values, q)) if values else float("nan")


def median_difference(on: list[float], off: list[float], seed: int = 1) -> tuple[float, float]:
    """95% bootstrap interval of median(on) - median(off)."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(on), np.asarray(off)
    draws = [
        np.median(rng.choice(a, a.size)) - np.median(rng.choice(b, b.size)) for _ in range(2000)
    ]
    low, high = np.quantile(draws, [0.025, 0.975])
    return float(low), float(high)


async def overhead(
    session: aiohttp.ClientSession, urls: dict[str, str], pids: dict[str, int], args: Any
) -> dict[str, Any]:
    """Phase 1: the two gateways interleaved request by request, nothing breaks."""
    streams: list[Stream] = []
    names = ["on", "off"]
    cpu0 = {name: process_cpu_s(pid) for name, pid in pids.items()}

    async def client(c: int) -> None:
        await asyncio.sleep(c * 0.05)  # no thundering herd of connects
        for r in range(args.rounds):
            name = names[(c + r) % 2]
            out = Stream(name, time.monotonic())
            streams.append(out)
            await stream(
                session, urls[name], body(c * 1000 + r, args.tokens, args.prompt_tokens), out
            )

    await asyncio.gather(*(client(c) for c in range(args.concurrency)))
    figures: dict[str, Any] = {}
    samples: dict[str, dict[str, list[float]]] = {}
    for name in names:
        mine = [s for s in streams if s.gateway == name]
        ok = [s for s in mine if s.error is None and s.finish]
        ttft = [s.ttft for s in ok if s.ttft is not None]
        tpot = [t for s in ok if (t := s.tpot()) is not None]
        samples[name] = {"ttft": ttft, "tpot": tpot}
        cpu = process_cpu_s(pids[name]) - cpu0[name]
        figures[name] = {
            "requests": len(mine),
            "failed": len(mine) - len(ok),
            "ttft_p50_ms": quantile(ttft, 0.5) * 1e3,
            "ttft_p99_ms": quantile(ttft, 0.99) * 1e3,
            "tpot_p50_ms": quantile(tpot, 0.5) * 1e3,
            "tpot_p99_ms": quantile(tpot, 0.99) * 1e3,
            "cpu_ms_per_request": cpu / max(len(mine), 1) * 1e3,
        }
    within = True
    for figure in ("ttft", "tpot"):
        low, high = median_difference(samples["on"][figure], samples["off"][figure])
        figures[f"{figure}_p50_difference_ci_ms"] = [low * 1e3, high * 1e3]
        within = within and low <= 0 <= high
    figures["within_noise"] = within
    return figures


@dataclass
class Target:
    """What a kill takes out: a pod (tier 1) or a whole cluster (tier 2). `address` is
    how a stream's `where` header names it; `ready`: the URLs that answer once it is
    back."""

    address: str
    kill: Callable[[], None]
    start: Callable[[], None]
    ready: list[str]


def pod_targets(pods: list[Pod]) -> list[Target]:
    return [
        Target(f"127.0.0.1:{p.port}", p.kill, p.start, [f"http://127.0.0.1:{p.port}/health"])
        for p in pods
    ]


def cluster_targets(clusters: list[Cluster]) -> list[Target]:
    def start(c: Cluster) -> Callable[[], None]:
        def again() -> None:
            for pod in c.pods:
                pod.start()
            c.start()

        return again

    return [
        Target(
            c.name,
            c.kill,
            start(c),
            [f"http://127.0.0.1:{p.port}/health" for p in c.pods] + [c.url + "/status"],
        )
        for c in clusters
    ]


async def resume(
    session: aiohttp.ClientSession,
    url: str,
    targets: list[Target],
    args: Any,
    kills: int,
    where: str = POD_HEADER,
) -> dict[str, Any]:
    """The closed loop through a migration-on gateway, the busiest target killed `kills`
    times mid-stream and started again: phase 2 with pods behind `igw serve`, phase 3
    with clusters behind `igw global`."""
    streams: list[Stream] = []
    killed: list[tuple[float, str]] = []  # (when, the target's address)
    done = asyncio.Event()

    async def client(c: int) -> None:
        await asyncio.sleep(c * 0.05)
        r = 0
        while not done.is_set():
            out = Stream("on", time.monotonic())
            streams.append(out)
            data = body(50_000 + c * 1000 + r, args.tokens, args.prompt_tokens)
            await stream(session, url, data, out, where)
            r += 1

    moved: set[int] = set()  # streams a kill moved off the pod their headers named

    def on_target(address: str, at: float) -> list[int]:
        """The streams in flight at `at` on the target at `address` (a stream a kill
        resumed elsewhere keeps its first header but is not there any more)."""
        return [
            i
            for i, s in enumerate(streams)
            if i not in moved and s.pod == address and s.sent < at and (s.end is None or s.end > at)
        ]

    hit: list[list[int]] = []  # per kill, the streams it broke

    async def killer() -> None:
        try:
            for _ in range(kills):
                await asyncio.sleep(args.settle_s)
                # the target with the most streams mid-answer (a first token seen, no end)
                now = time.monotonic()
                running = {
                    t.address: sum(1 for i in on_target(t.address, now) if streams[i].times)
                    for t in targets
                }
                target = max(targets, key=lambda t: (running[t.address], -targets.index(t)))
                at = time.monotonic()
                target.kill()
                killed.append((at, target.address))
                hit.append(on_target(target.address, at))
                moved.update(hit[-1])
                await asyncio.sleep(args.settle_s)  # the broken streams go on elsewhere
                target.start()
                for ready in target.ready:
                    await wait_ready(session, ready)
            await asyncio.sleep(args.settle_s)
        finally:
            done.set()

    await asyncio.gather(killer(), *(client(c) for c in range(args.concurrency)))
    gaps: list[float] = []
    retried: set[int] = set()
    per_kill: list[int] = []  # resumed streams per kill
    for (at, _), broken in zip(killed, hit, strict=True):
        before = len(gaps)
        for i in broken:
            s = streams[i]
            started = bool(s.times) and s.times[0] < at
            if started and (gap := s.gap_across(at)) is not None:
                gaps.append(gap)
            elif not started:
                retried.add(i)
        per_kill.append(len(gaps) - before)
    fresh = [t for i, s in enumerate(streams) if i not in retried and (t := s.ttft) is not None]
    failed = [s for s in streams if s.error is not None or not s.finish]
    gap_p99, ttft_p99 = quantile(gaps, 0.99), quantile(fresh, 0.99)
    ratio = gap_p99 / ttft_p99 if fresh and gaps else float("nan")
    return {
        "kills": len(killed),
        "requests": len(streams),
        "failed": len(failed),
        "errors": sorted({s.error or "no finish_reason" for s in failed})[:5],
        "resumed_streams": len(gaps),
        "resumed_per_kill": per_kill,
        "retried_before_first_token": len(retried),
        "resume_gap_p50_ms": quantile(gaps, 0.5) * 1e3,
        "resume_gap_p99_ms": gap_p99 * 1e3,
        "fresh_ttft_p50_ms": quantile(fresh, 0.5) * 1e3,
        "fresh_ttft_p99_ms": ttft_p99 * 1e3,
        "ratio": ratio,
        "bar": RESUME_BAR,
        "pass": bool(ratio <= RESUME_BAR) and not failed,
    }


async def metric(session: aiohttp.ClientSession, url: str, name: str) -> float:
    """The sum of a metric's samples on a /metrics page (0 when absent)."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.split("{")[0] == name
    )


async def gateway_gaps(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The gateway's own resume-gap histogram (count, mean) and migrations counted."""
    count = await metric(session, url, "igw_request_resume_gap_seconds_count")
    total = await metric(session, url, "igw_request_resume_gap_seconds_sum")
    return {
        "count": count,
        "mean_ms": total / count * 1e3 if count else float("nan"),
        "migrations_total": await metric(session, url, "igw_request_migrations_total"),
    }


async def until_routable(session: aiohttp.ClientSession, url: str, clusters: int) -> None:
    """Once `igw global` answers, until it has polled `clusters` clusters routable."""
    await wait_ready(session, url + "/health")
    deadline = time.monotonic() + 60
    while True:
        async with session.get(url + "/health") as response:
            if len((await response.json())["clusters"]) == clusters:
                return
        if time.monotonic() > deadline:
            raise RuntimeError("the clusters did not become routable in 60 s")
        await asyncio.sleep(0.1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with scratch_folder("igw-migration-") as folder:
        return await _run(folder, args)


async def _run(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    pods = [Pod(f"pod-{i}", folder / f"pod-{i}.log") for i in range(args.pods)]
    gateways: dict[str, Any] = {}
    clusters: list[Cluster] = []
    try:
        for pod in pods:
            pod.start()
        for name, migration in (("on", True), ("off", False)):
            gateways[name] = start_serve(folder, name, pods, migration)
        urls = {name: f"http://127.0.0.1:{port}" for name, (_, port) in gateways.items()}
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            for pod in pods:
                await wait_ready(session, f"http://127.0.0.1:{pod.port}/health")
            for url in urls.values():
                await wait_ready(session, url + "/health")
            await asyncio.sleep(0.5)  # a scrape of every pod
            pids = {name: process.pid for name, (process, _) in gateways.items()}
            started = time.monotonic()
            nothing_breaks = await overhead(session, urls, pids, args)
            broken = await resume(session, urls["on"], pod_targets(pods), args, args.kills)
            broken["gateway_resume_gap"] = await gateway_gaps(session, urls["on"])
            for process, _ in gateways.values():  # phase 3 has gateways of its own
                process.kill()
                process.wait(timeout=10)
            clusters_lost = None
            if args.cluster_kills:
                half = len(pods) // 2
                clusters = [
                    Cluster(folder, "c1", pods[:half]),
                    Cluster(folder, "c2", pods[half:]),
                ]
                for cluster in clusters:
                    cluster.start()
                gateways["global"] = start_global(folder, clusters)
                front = f"http://127.0.0.1:{gateways['global'][1]}"
                await until_routable(session, front, len(clusters))
                targets = cluster_targets(clusters)
                kills = args.cluster_kills
                clusters_lost = await resume(session, front, targets, args, kills, CLUSTER_HEADER)
                clusters_lost["gateway_resume_gap"] = await gateway_gaps(session, front)
            wall = time.monotonic() - started
    finally:
        for process, _ in gateways.values():
            process.kill()
            process.wait(timeout=10)
        for cluster in clusters:
            cluster.kill()
        for pod in pods:
            pod.kill()
    return {
        "pods": args.pods,
        "concurrency": args.concurrency,
        "tokens": args.tokens,
        "prompt_tokens": args.prompt_tokens,
        "overhead": nothing_breaks,
        "resume": broken,
        "cluster_loss": clusters_lost,
        "wall_s": wall,
        "load_average": [load_before, os.getloadavg()[0]],
        "cpus": os.cpu_count(),
    }


def print_tables(r: dict[str, Any]) -> None:
    o, b = r["overhead"], r["resume"]
    print(
        f"{r['pods']} emulated H100 pods, {r['concurrency']} streams in flight, prompts of "
        f"about {r['prompt_tokens']} tokens, answers of {r['tokens']}; {r['cpus']} CPUs, "
        f"load average {r['load_average'][0]:.1f} -> {r['load_average'][1]:.1f}; "
        f"{r['wall_s']:.0f} s"
    )
    print("\nNothing breaks: igw serve with migration on vs off, interleaved")
    print(f"  {'figure':24} {'on':>9} {'off':>9}")
    for key in ("requests", "failed"):
        print(f"  {key:24} {o['on'][key]:9d} {o['off'][key]:9d}")
    for key in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "cpu_ms_per_request"):
        print(f"  {key:24} {o['on'][key]:9.2f} {o['off'][key]:9.2f}")
    for key in ("ttft", "tpot"):
        low, high = o[f"{key}_p50_difference_ci_ms"]
        print(f"  {key} p50 on-off, 95% CI  [{low:+.2f}, {high:+.2f}] ms")
    print(f"  within noise: {'yes' if o['within_noise'] else 'NO'}")
    print(f"\nA pod killed mid-stream, {b['kills']} times (migration on)")
    print_resume(b)
    if r["cluster_loss"] is not None:
        c = r["cluster_loss"]
        print(
            f"\nA cluster lost whole mid-stream (its igw serve and its {r['pods'] // 2} pods "
            f"killed), {c['kills']} times, behind igw global (tier 2)"
        )
        print_resume(c)


def print_resume(b: dict[str, Any]) -> None:
    """One kill phase's table."""
    print(f"  requests {b['requests']}, failed {b['failed']} {b['errors'] or ''}")
    print(
        f"  resumed streams {b['resumed_streams']} {b['resumed_per_kill']}, "
        f"retried before their first token {b['retried_before_first_token']}"
    )
    print(f"  {'figure':24} {'p50 ms':>9} {'p99 ms':>9}")
    print(f"  {'resume gap':24} {b['resume_gap_p50_ms']:9.1f} {b['resume_gap_p99_ms']:9.1f}")
    print(f"  {'fresh TTFT':24} {b['fresh_ttft_p50_ms']:9.1f} {b['fresh_ttft_p99_ms']:9.1f}")
    g = b["gateway_resume_gap"]
    print(f"  gateway histogram: {g['count']:.0f} gaps, mean {g['mean_ms']:.1f} ms")
    verdict = "holds" if b["pass"] else "MISSED"
    print(f"  gap p99 / TTFT p99 = {b['ratio']:.2f} (bar <= {b['bar']}): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=18)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--prompt-tokens", type=int, default=1000, help="about, per request")
    parser.add_argument("--rounds", type=int, default=4, help="requests per client, phase 1")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument(
        "--cluster-kills", type=int, default=3, help="phase 3, tier 2 (0: leave it out)"
    )
    parser.add_argument("--settle-s", type=float, default=1.5, help="wait around each kill")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.pods < 2 or args.concurrency < 2 or args.kills < 1:
        parser.error("needs --pods >= 2, --concurrency >= 2, --kills >= 1")
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    else:
        print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
