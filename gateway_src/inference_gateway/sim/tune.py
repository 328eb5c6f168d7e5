"""`igw tune SCENARIO`: search a profile's scorer weights on a scenario.

A seeded random search over a small weight grid: the current weights are trial 0, then
each trial draws a weight per scorer (0 drops the scorer from the profile; at least one
stays). Every trial replays the same requests (same scenario seed), so differences are
the weights' alone. The objective is the fewest rejections, then the lowest P99 TTFT,
then P95. Scorers declared in the config's `plugins` but absent from the profile are
searched too, so tuning can add one.

A trace replayed from production logs is just a scenario with
`workload.arrival: {kind: trace, path: ...}`. Weights tuned on one scenario fit that
scenario: check them on the others (`igw what-if`) before shipping them.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from inference_gateway.config.spec import GatewayConfigSpec, PluginRef, SchedulingProfileSpec
from inference_gateway.core.scheduling.registry import kind_of
from inference_gateway.errors import ConfigError
from inference_gateway.sim.capacity import fleet_capacity
from inference_gateway.sim.configs import load_gateway_config, run_config, shorten
from inference_gateway.sim.scenario import Scenario, load_scenario

__all__ = ["Trial", "register", "tune"]

GRID = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)
FIGURES = (
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "output_tokens_per_s",
    "rejected",
)


@dataclass(frozen=True, slots=True)
class Trial:
    weights: dict[str, float]
    figures: dict[str, Any]

    def key(self) -> tuple[float, float, float]:
        f = self.figures
        return (f["rejected"], f["ttft_p99_s"], f["ttft_p95_s"])


def _scorers(config: GatewayConfigSpec, profile: str) -> tuple[dict[str, float], list[str]]:
    """Current weights of the profile's scorers, and every scorer instance searchable."""
    spec = config.profile(profile)
    scorers = {p.instance_name for p in config.plugins if kind_of(p.type) == "scorer"}
    current = {r.plugin_ref: float(r.weight or 0) for r in spec.plugins if r.plugin_ref in scorers}
    searchable = [p.instance_name for p in config.plugins if p.instance_name in scorers]
    return current, searchable


def with_weights(
    config: GatewayConfigSpec, profile: str, weights: dict[str, float]
) -> GatewayConfigSpec:
    """`config` with `profile`'s scorers replaced by `weights` (zero weights dropped)."""
    spec = config.profile(profile)
    named = {p.instance_name for p in config.plugins if kind_of(p.type) == "scorer"}
    others = [r for r in spec.plugins if r.plugin_ref not in named]
    scorers = [PluginRef(plugin_ref=n, weight=w) for n, w in weights.items() if w > 0]
    new = SchedulingProfileSpec(name=profile, plugins=scorers + others)
    profiles = [new if p.name == profile else p for p in config.scheduling_profiles]
    return config.model_copy(update={"scheduling_profiles": profiles})


def tune(
    scenario: Scenario,
    config: GatewayConfigSpec,
    *,
    profile: str | None = None,
    trials: int = 16,
    seed: int = 0,
    progress: Any = None,
) -> tuple[Trial, list[Trial]]:
    """(the current weights' trial, all trials best first)."""
    profile = profile or config.default_profile
    if profile not in {p.name for p in config.scheduling_profiles}:
        raise ConfigError("profile", [f"profile: no scheduling profile {profile!r} in the config"])
    current, searchable = _scorers(config, profile)
    capacity = fleet_capacity(scenario.fleet, scenario.workload, scenario.seed)
    rnd = random.Random(seed)
    seen = {_key(current)}
    results = [_trial(scenario, config, profile, current, capacity, searchable)]
    if progress is not None:
        progress(1, trials)
    explore = max(1, trials // 2)  # the first half explores, the second refines the best
    attempts = 0
    while len(results) < trials and attempts < 50 * trials:
        attempts += 1
        if len(results) < explore:
            weights = {name: rnd.choice(GRID) for name in searchable}
        else:
            best = min(results, key=Trial.key).weights
            weights = {name: best.get(name, 0.0) for name in searchable}
            name = rnd.choice(searchable)
            weights[name] = rnd.choice([w for w in GRID if w != weights[name]])
        weights = {n: w for n, w in weights.items() if w > 0}
        if not weights or _key(weights) in seen:
            continue
        seen.add(_key(weights))
        results.append(_trial(scenario, config, profile, weights, capacity, searchable))
        if progress is not None:
            progress(len(results), trials)
    return results[0], sorted(results, key=Trial.key)


def _key(weights: dict[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((n, w) for n, w in weights.items() if w > 0))


def _trial(
    scenario: Scenario,
    config: GatewayConfigSpec,
    profile: str,
    weights: dict[str, float],
    capacity: float,
    order: list[str],
) -> Trial:
    """One run; the trial's weights listed in `order` (the config's plugin order), so every
    row of the table and the JSON names the scorers in the same order."""
    tuned = with_weights(config, profile, weights)
    listed = {n: weights[n] for n in order if n in weights}
    listed.update({n: w for n, w in weights.items() if n not in listed})
    return Trial(listed, run_config(scenario, tuned, profile=profile, capacity_rps=capacity))


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="search a scheduling profile's scorer weights on a scenario",
        description="Replays one scenario (shipped name, YAML file, or a trace scenario) "
        "under many weight sets and prints the best next to the current ones.",
    )
    parser.add_argument("scenario", help="shipped scenario name or YAML path")
    parser.add_argument("--config", help="gateway config file (default: the shipped config)")
    parser.add_argument("--profile", help="profile to tune (default: the config's default)")
    parser.add_argument("--trials", type=int, default=16, help="weight sets to try (16)")
    parser.add_argument("--duration", type=float, help="simulate only the first N seconds")
    parser.add_argument("--seed", type=int, default=0, help="search seed (0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.trials < 1:
        raise ConfigError("--trials", ["--trials: must be at least 1"])
    scenario = shorten(load_scenario(args.scenario), args.duration)
    config = load_gateway_config(args.config) if args.config else GatewayConfigSpec()
    profile = args.profile or config.default_profile

    def progress(done: int, total: int) -> None:
        if not args.json:  # one line each: logs and CI keep them apart from the table
            print(f"  trial {done}/{total}", file=sys.stderr, flush=True)

    current, ranked = tune(
        scenario, config, profile=profile, trials=args.trials, seed=args.seed, progress=progress
    )
    out = {
        "scenario": scenario.name,
        "profile": profile,
        "current": {"weights": current.weights, **_pick(current.figures)},
        "best": {"weights": ranked[0].weights, **_pick(ranked[0].figures)},
        "trials": [{"weights": t.weights, **_pick(t.figures)} for t in ranked],
    }
    if args.json:
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    _print(out)
    return 0


def _pick(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: figures[k] for k in FIGURES}


def _short(scorer: str) -> str:
    """`predicted-ttft-scorer` → `predicted-ttft`, to keep the table narrow."""
    return scorer.removesuffix("-scorer").replace("kv-cache-utilization", "kv-cache")


def _print(out: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console

    from inference_gateway.terminal import Column, print_table

    rows = [("current", out["current"])] + [
        ("best" if i == 0 else f"#{i + 1}", t) for i, t in enumerate(out["trials"][:5])
    ]
    print_table(
        console or Console(),
        f"igw tune {out['scenario']} — profile {out['profile']}",
        [
            Column("trial"),
            Column("weights", text=True),
            Column("TTFT\np95"),
            Column("TTFT\np99"),
            Column("tok/s"),
            Column("rej"),
        ],
        [
            [
                label,
                "\n".join(f"{_short(k)} {v:g}" for k, v in t["weights"].items()),
                f"{t['ttft_p95_s']:.3f}",
                f"{t['ttft_p99_s']:.3f}",
                f"{t['output_tokens_per_s']:,.0f}",
                str(t["rejected"]),
            ]
            for label, t in rows
        ],
        legend="TTFT in seconds (time to first token); tok/s: output tokens per second; "
        "rej: rejected. Weights one per line, in the config's plugin order.",
        keys=2,
        sections=True,
    )
    cur, best = out["current"]["ttft_p99_s"], out["best"]["ttft_p99_s"]
    change = (best - cur) / cur * 100 if cur else 0.0
    print(f"best P99 TTFT {best:.3f} s vs current {cur:.3f} s ({change:+.1f}%)")
    print("schedulingProfiles entry:")
    print(f"  - name: {out['profile']}")
    print("    plugins:")
    for name, weight in out["best"]["weights"].items():
        print(f"      - {{pluginRef: {name}, weight: {weight:g}}}")
    print("      - {pluginRef: max-score-picker}")
