"""`igw simulate NAME-OR-FILE [--policies a,b] [--json]`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from .. import native
from .scenario import load_scenario, shipped_scenarios

__all__ = ["register"]

COLUMNS = [
    ("ttft_p50_s", "TTFT p50 s"),
    ("ttft_p95_s", "TTFT p95 s"),
    ("ttft_p99_s", "TTFT p99 s"),
    ("e2e_p99_s", "E2E p99 s"),
    ("output_tokens_per_s", "tok/s"),
    ("completed", "done"),
    ("rejected", "rejected"),
    ("cost_per_million_tokens", "$/Mtok"),
]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a fleet under several routing policies (virtual time)",
        description="Run a shipped scenario (see --list) or a scenario YAML file.",
    )
    parser.add_argument("scenario", nargs="?", help="shipped scenario name or YAML path")
    parser.add_argument("--policies", help="comma-separated policy names")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--list", action="store_true", help="list shipped scenarios")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from .global_scenario import is_fleet_scenario, shipped_fleet_scenarios

    if args.list:
        for name, description in {**shipped_scenarios(), **shipped_fleet_scenarios()}.items():
            print(f"{name:24} {description}")
        return 0
    if not args.scenario:
        print("igw simulate: give a scenario name or file (or --list)", file=sys.stderr)
        return 2
    if is_fleet_scenario(args.scenario):  # clusters behind the global router
        from .fleet_cli import run_fleet

        return run_fleet(args)
    from .runner import simulate

    scenario = load_scenario(args.scenario)
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
    print_table(result)
    return 0


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{result['scenario']} (seed {result['seed']}, "
        f"capacity {result['capacity_rps']:.1f} req/s)"
    )
    table.add_column("policy")
    for _, label in COLUMNS:
        table.add_column(label, justify="right")
    for name, row in result["policies"].items():
        table.add_row(name, *[_fmt(row[key]) for key, _ in COLUMNS])
    Console().print(table)


def _fmt(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}" if value < 100 else f"{value:,.0f}"
