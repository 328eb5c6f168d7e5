"""`igw simulate NAME-OR-FILE [--policies a,b] [--duration S] [--json]`, `igw simulate --list`."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

import orjson

from inference_gateway import native
from inference_gateway.sim.configs import shorten
from inference_gateway.sim.policies import POLICIES
from inference_gateway.sim.scenario import load_scenario, shipped_scenarios

__all__ = ["policy_names", "register"]

COLUMNS = [
    ("ttft_p50_s", "TTFT\np50"),
    ("ttft_p95_s", "TTFT\np95"),
    ("ttft_p99_s", "TTFT\np99"),
    ("tpot_p50_s", "TPOT\np50"),
    ("tpot_p99_s", "TPOT\np99"),
    ("e2e_p99_s", "E2E\np99"),
    ("output_tokens_per_s", "tok/s"),
    ("completed", "done"),
    ("rejected", "rej"),
    ("cost_per_million_tokens", "$/Mtok"),
]
LEGEND = (
    "TTFT: time to first token; TPOT: time per output token after the first; E2E: "
    "arrival to last token; all in seconds. tok/s: "
    "output tokens per second; done: completed; rej: rejected (429); $/Mtok: fleet cost "
    "per million output tokens."
)

# a scenario with pod failures (`sim.faults`): what became of the streams on the lost pods
FAULT_COLUMNS = [
    ("pod_failures", "pods\nlost"),
    ("requests_lost", "req\nlost"),
    ("lost_mid_stream", "lost\nmid-stream"),
    ("retried_before_first_token", "retried\nwhole"),
    ("requests_resumed", "req\nresumed"),
    ("reprefill_gpu_s", "re-prefill\nGPU-s"),
    ("resume_gap_p50_s", "gap\np50"),
    ("resume_gap_p99_s", "gap\np99"),
]
# and with a P/D split (`disaggregation`): what became of the legs
PD_FAULT_COLUMNS = [
    ("prefill_legs_retried", "legs\nretried"),
    ("requests_rerouted", "req\nrerouted"),
]
PD_FAULT_LEGEND = (
    " legs retried: prefill legs a lost prefill pod held, served whole by their decode "
    "pods; req rerouted: requests whose decode pod was lost before the KV read, routed "
    "again."
)
FAULT_LEGEND = (
    "req lost: streams cut by a lost pod and not resumed, and, without resume, requests "
    "that had no token yet (igw serve answers those 502); retried whole: with resume, "
    "those sent again whole to another pod; re-prefill GPU-s: GPU seconds the continuations "
    "spent prefilling the prompt and the tokens delivered again; gap: from the break to the "
    "continuation's first token, in seconds."
)


def policy_names() -> list[str]:
    """Every name `--policies` takes, with the two parameterised forms."""
    return [*sorted(POLICIES), "gateway:PROFILE", "POLICY@N"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a fleet under several routing policies (virtual time)",
        description=textwrap.fill(
            "Run a shipped scenario (see --list) or a scenario YAML file. "
            f"Policies: {', '.join(policy_names())} (gateway:PROFILE runs a named "
            "scheduling profile, e.g. gateway:throughput; POLICY@N runs N replicas of a "
            "policy, each with its own view).",
            78,
            break_on_hyphens=False,  # policy names stay whole
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", nargs="?", help="shipped scenario name or YAML path")
    parser.add_argument(
        "--policies", help="comma-separated policy names (default: the scenario's own)"
    )
    parser.add_argument(
        "--duration", type=float, metavar="S", help="simulate only the first S seconds"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--list", action="store_true", help="list shipped scenarios and policy names"
    )
    parser.set_defaults(handler=run)


def print_list() -> None:
    """Shipped scenarios with the first paragraph of their description, then the policies;
    the descriptions wrap at word boundaries to the terminal (80 columns in logs)."""
    from rich.console import Console

    from inference_gateway.sim.fleet.scenario import shipped_fleet_scenarios
    from inference_gateway.terminal import Column, print_table

    rows = []
    for name in shipped_scenarios():
        description = load_scenario(name).description
        rows.append([name, " ".join(description.strip().split("\n\n")[0].split())])
    for name, description in shipped_fleet_scenarios().items():  # clusters behind igw global
        rows.append([name, " ".join(description.split())])
    console = Console()
    columns = [Column("scenario", text=True, wrap=False), Column("what it exercises", text=True)]
    print_table(console, "Shipped scenarios (igw simulate NAME)", columns, rows)
    console.print(f"\npolicies (--policies a,b): {', '.join(policy_names())}")


def run(args: argparse.Namespace) -> int:
    from inference_gateway.sim.fleet.scenario import is_fleet_scenario

    if args.list:
        print_list()
        return 0
    if not args.scenario:
        print("igw simulate: give a scenario name or file (or --list)", file=sys.stderr)
        return 2
    if args.duration is not None and args.duration <= 0:
        print("igw simulate: --duration must be above 0", file=sys.stderr)
        return 2
    if is_fleet_scenario(args.scenario):  # clusters behind the global router
        from inference_gateway.sim.fleet.cli import run_fleet

        return run_fleet(args)
    from inference_gateway.sim.runner import simulate

    scenario = shorten(load_scenario(args.scenario), args.duration)
    policies = [p.strip() for p in args.policies.split(",")] if args.policies else None
    if args.json:
        result = simulate(scenario, policies)
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    engine = {"compiled": "compiled (mypyc)", "stale": "sources (compiled build is stale)"}
    console.print(f"simulator modules: {engine.get(native.status(), 'sources')}", style="dim")
    with Progress(console=console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(policy: str, fraction: float) -> None:
            if policy not in tasks:
                tasks[policy] = bar.add_task(f"simulating {policy}", total=1.0)
            bar.update(tasks[policy], completed=fraction)

        result = simulate(scenario, policies, progress=progress)
    print_table(result, scenario.duration_s)
    return 0


def print_table(result: dict[str, Any], duration_s: float, console: Any = None) -> None:
    from rich.console import Console

    from inference_gateway.terminal import Column, print_table

    print_table(
        console or Console(),
        f"{result['scenario']} ({duration_s:g} s simulated, seed {result['seed']}, "
        f"capacity {result['capacity_rps']:.1f} req/s)",
        [Column("policy", text=True), *(Column(label) for _, label in COLUMNS)],
        [
            [name, *(_fmt(row[key]) for key, _ in COLUMNS)]
            for name, row in result["policies"].items()
        ],
        legend=LEGEND,
    )
    rows = result["policies"]
    if any("pod_failures" in row for row in rows.values()):
        split = any("prefill_legs" in row for row in rows.values())
        columns = FAULT_COLUMNS + (PD_FAULT_COLUMNS if split else [])
        print_table(
            console or Console(),
            "pod failures",
            [Column("policy", text=True), *(Column(label) for _, label in columns)],
            [[name, *(_fmt(row[key]) for key, _ in columns)] for name, row in rows.items()],
            legend=FAULT_LEGEND + (PD_FAULT_LEGEND if split else ""),
        )


def _fmt(value: float | int) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if value != value:  # NaN: no figure (no stream was resumed)
        return "-"
    if value < 10:
        return f"{value:.3f}"
    return f"{value:.1f}" if value < 1000 else f"{value:,.0f}"
