"""`igw simulate FLEET-SCENARIO`: the fleet report as tables (or one JSON object)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from inference_gateway.sim.fleet.scenario import load_fleet_scenario

__all__ = ["run_fleet"]

RESUME_LEGEND = (
    "resumed: streams a lost cluster cut after their first token that went on at the next "
    "cluster (the router's `migration`, docs/migration.md); re-prefill GPU s: GPU seconds "
    "the continuations spent prefilling the prompt and the tokens delivered again; resume "
    "gap: from the break to the continuation's first token at the router, in seconds."
)


def run_fleet(args: argparse.Namespace) -> int:
    from inference_gateway.sim.fleet.runner import simulate_fleet

    scenario = load_fleet_scenario(args.scenario)
    profiles = [p.strip() for p in args.policies.split(",")] if args.policies else None
    if profiles is not None:
        unknown = [p for p in profiles if p not in ("latency", "cost")]
        if unknown:
            print(
                f"igw simulate: a fleet scenario runs router profiles (latency, cost), "
                f"not {unknown}",
                file=sys.stderr,
            )
            return 2
    result = simulate_fleet(scenario, profiles)
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_fleet(result)
    return 0


def _f(value: float | None, digits: int = 3) -> str:
    """A figure, or "-" for none (None; NaN: no stream was resumed, no gap to measure)."""
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def print_fleet(result: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console

    from inference_gateway.terminal import Column, print_table

    console = console or Console()
    print_table(
        console,
        f"{result['scenario']} (seed {result['seed']}, "
        f"capacity {result['capacity_rps']:.1f} req/s)",
        [
            Column("cluster", text=True, wrap=False),
            Column("region", text=True, wrap=False),
            Column("pods"),
            Column("$/h"),
            Column("capacity\nreq/s"),
            Column("$/Mtok at\ncapacity"),
        ],
        [
            [
                name,
                c["region"],
                str(c["pods"]),
                f"{c['hourly_usd']:.2f}",
                f"{c['capacity_rps']:.1f}",
                f"{c['unit_cost_per_million_tokens']:.3f}",
            ]
            for name, c in result["clusters"].items()
        ],
    )
    profiles = result["profiles"]
    rows: list[tuple[str, Any]] = [
        ("served", lambda r: r["requests"]["served"]),
        ("  of them retried off a dead cluster", lambda r: r["requests"]["retried_and_served"]),
        ("lost after their first token", lambda r: r["requests"]["lost_started"]),
        ("resumed on another cluster", lambda r: r["requests_resumed"]),
        ("  re-prefill GPU s", lambda r: _f(r["reprefill_gpu_s"], 1)),
        ("  resume gap p50 s", lambda r: _f(r["resume_gap_p50_s"])),
        ("  resume gap p99 s", lambda r: _f(r["resume_gap_p99_s"])),
        ("unanswered (never started)", lambda r: r["requests"]["unanswered"]),
        ("  of them dropped by a lost cluster", lambda r: r["lost_before_first_token"]),
        ("rejected by a cluster's admission", lambda r: r["requests"]["rejected"]),
        ("TTFT p50 s", lambda r: _f(r["ttft_p50_s"])),
        ("TTFT p99 s", lambda r: _f(r["ttft_p99_s"])),
        ("TPOT p50 s", lambda r: _f(r["tpot_p50_s"])),
        ("TPOT p99 s", lambda r: _f(r["tpot_p99_s"])),
        ("served cross-region", lambda r: r["cross_region"]["served"]),
        ("  their TTFT p99 s", lambda r: _f(r["cross_region"]["ttft_p99_s"])),
        ("$/M output tokens, fleet", lambda r: f"{r['cost']['per_million_tokens']:.3f}"),
        (
            "$/M output tokens, attributed",
            lambda r: f"{r['cost']['attributed_per_million_tokens']:.3f}",
        ),
    ]
    console.print()
    print_table(
        console,
        "per router profile",
        [Column("", text=True), *(Column(name) for name in profiles)],
        [[label, *(str(cell(r)) for r in profiles.values())] for label, cell in rows],
        legend=RESUME_LEGEND,
    )
    for name, r in result["profiles"].items():
        if r["events"]:
            console.print()
            _events(console, name, r)
        for e in r["events"]:
            if e["action"] == "restore":
                bins = " ".join(f"{v:.2f}" for v in e["share_during"])
                console.print(
                    f"[{name}] share of {e['target']} after its return at "
                    f"{e['at_s']:g} s, per {r['share']['bin_s']:g} s: {bins}",
                    markup=False,
                )
        console.print()
        _shares(console, name, r)
        if any(c["sheddable_share"] for c in r["cost"]["by_cluster"].values()):
            shed = ", ".join(
                f"{n} {c['sheddable_share']:.1%}" for n, c in r["cost"]["by_cluster"].items()
            )
            console.print(f"[{name}] sheddable requests served by: {shed}", markup=False)


def _events(console: Any, profile: str, report: dict[str, Any]) -> None:
    from inference_gateway.terminal import Column, print_table

    rows = []
    for e in report["events"]:
        p99 = e["ttft_p99_s"]
        kill = e["action"] == "kill"
        rows.append(
            [
                f"{e['at_s']:.0f}",
                f"{e['action']} {e['target']}",
                ", ".join(e["clusters"]),
                _f(e.get("failover_s")) if kill else "",
                _f(e.get("last_retry_s")) if kill else "",
                str(e["lost_started"]) if kill else "",
                str(e["resumed"]) if kill else "",
                str(e["retried_and_served"]) if kill else "",
                _f(e["retried_ttft_max_s"]) if kill else "",
                _f(p99["before"]),
                _f(p99["during"]),
                _f(p99["after"]),
            ]
        )
    headers = ("failover\ns", "last\nretry s", "lost", "resumed", "retried", "retried\nmax TTFT",
               "before", "during", "after")  # fmt: skip
    print_table(
        console,
        f"[{profile}] events (P99 TTFT s by arrival window)",
        [
            Column("at s"),
            Column("event", text=True),
            Column("clusters", text=True),
            *(Column(h) for h in headers),
        ],
        rows,
        keys=2,
    )


def _shares(console: Any, profile: str, report: dict[str, Any]) -> None:
    from inference_gateway.terminal import Column, print_table

    share = report["share"]
    names = list(share["by_cluster"])
    print_table(
        console,
        f"[{profile}] share of routing decisions per {share['bin_s']:g} s",
        [Column("from s"), *(Column(n) for n in names)],
        [
            [f"{start:g}", *(f"{share['by_cluster'][n][k]:.2f}" for n in names)]
            for k, start in enumerate(share["start_s"])
        ],
    )
