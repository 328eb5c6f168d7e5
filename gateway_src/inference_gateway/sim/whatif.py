"""`igw what-if --base A.yaml --head B.yaml`: the predicted effect of a routing change.

For a pull request that edits a gateway config (an `InferenceGatewayConfig`, a bare spec
or an environment file's `gateway:` section), replay one scenario under the base and the
head version and print the change in TTFT percentiles, throughput and rejections. Both
runs see the same requests (same scenario and seed), so the difference is the config's.
`--fail-above PCT` exits 1 when head's P99 TTFT is more than PCT% worse than base's, so
CI can hold a change back until a reviewer has read the figures.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from inference_gateway.sim.capacity import fleet_capacity
from inference_gateway.sim.configs import load_gateway_config, run_config, shorten
from inference_gateway.sim.scenario import load_scenario

__all__ = ["compare", "register"]

DEFAULT_SCENARIO = "mixed-fleet-bursty"
ROWS = [
    ("ttft_p50_s", "TTFT p50 s", "lower"),
    ("ttft_p95_s", "TTFT p95 s", "lower"),
    ("ttft_p99_s", "TTFT p99 s", "lower"),
    ("tpot_p50_s", "TPOT p50 s", "lower"),
    ("tpot_p99_s", "TPOT p99 s", "lower"),
    ("e2e_p99_s", "E2E p99 s", "lower"),
    ("output_tokens_per_s", "output tok/s", "higher"),
    ("completed", "completed", "higher"),
    ("rejected", "rejected", "lower"),
]


def compare(base: dict[str, Any], head: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per figure: base, head, absolute and relative change."""
    out = {}
    for key, _, _ in ROWS:
        b, h = base[key], head[key]
        out[key] = {
            "base": b,
            "head": h,
            "change": round(h - b, 6),
            "change_pct": round((h - b) / b * 100, 2) if b else None,
        }
    return out


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "what-if",
        help="predict the effect of a gateway config change (base vs head) in simulation",
        description="Replays one scenario under two versions of a gateway config and "
        "prints the predicted change in TTFT, throughput and rejections.",
    )
    parser.add_argument("--base", required=True, help="config file on main")
    parser.add_argument("--head", required=True, help="config file in the pull request")
    parser.add_argument(
        "--scenario", default=DEFAULT_SCENARIO, help=f"scenario (default {DEFAULT_SCENARIO})"
    )
    parser.add_argument("--profile", help="scheduling profile (default: each config's default)")
    parser.add_argument("--duration", type=float, help="simulate only the first N seconds")
    parser.add_argument(
        "--fail-above", type=float, metavar="PCT", help="exit 1 if P99 TTFT worsens by more"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    base_config = load_gateway_config(args.base)
    head_config = load_gateway_config(args.head)
    scenario = shorten(load_scenario(args.scenario), args.duration)
    capacity = fleet_capacity(scenario.fleet, scenario.workload, scenario.seed)
    figures = {}
    for label, config in (("base", base_config), ("head", head_config)):
        if not args.json:
            print(f"  simulating {label} ...", file=sys.stderr, flush=True)
        figures[label] = run_config(scenario, config, profile=args.profile, capacity_rps=capacity)
    changes = compare(figures["base"], figures["head"])
    p99 = changes["ttft_p99_s"]["change_pct"]
    failed = args.fail_above is not None and p99 is not None and p99 > args.fail_above
    out = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "duration_s": scenario.duration_s,
        "capacity_rps": round(capacity, 3),
        "base": args.base,
        "head": args.head,
        "changes": changes,
        "fail_above_pct": args.fail_above,
        "verdict": "fail" if failed else "pass",
    }
    if args.json:
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print(out)
    if failed:
        p99 = changes["ttft_p99_s"]
        print(
            f"igw what-if: P99 TTFT changed by {p99['change_pct']:+.1f}% "
            f"({p99['base']:.3f} s -> {p99['head']:.3f} s), above --fail-above "
            f"{args.fail_above:g}%",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _print(out: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console

    from inference_gateway.terminal import Column, print_table

    rows = []
    for key, label, better in ROWS:
        c = out["changes"][key]
        pct = c["change_pct"]
        change = f"{c['change']:+,.3f}" if isinstance(c["change"], float) else f"{c['change']:+d}"
        if pct is not None:
            change += f" ({pct:+.1f}%)"
        improved = c["change"] < 0 if better == "lower" else c["change"] > 0
        verdict = "=" if not c["change"] else ("better" if improved else "worse")
        rows.append([label, _fmt(c["base"]), _fmt(c["head"]), change, verdict])
    print_table(
        console or Console(),
        f"igw what-if on {out['scenario']} (seed {out['seed']}, {out['duration_s']:g} s)",
        [
            Column("figure", text=True),
            Column("base"),
            Column("head"),
            Column("change"),
            Column("verdict", text=True, wrap=False),
        ],
        rows,
    )


def _fmt(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:,.3f}"
